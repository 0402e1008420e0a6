"""Faithful fakes of the engines the KV connectors plug into (vLLM), for tests without them."""
