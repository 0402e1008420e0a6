"""Integrations with other frameworks; each submodule imports its framework, this package
imports none of them."""
