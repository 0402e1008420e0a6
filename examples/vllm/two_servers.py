# Run: .venv-vllm/bin/python examples/vllm/two_servers.py   (after `make vllm-venv`)
"""Two OpenAI-compatible vLLM servers (hosts 0, 1) share a cxlkit KV pool: B loads the prompt
blocks A stored. A tiny Llama (config.json written here, dummy weights), token-id prompts."""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request

VLLM, POOL = os.path.join(os.path.dirname(sys.executable), "vllm"), f"cxlkit-ex-{os.getpid()}"


def serve(model, host):
    with socket.create_server(("127.0.0.1", 0)) as s:  # a free port on 127.0.0.1
        port = s.getsockname()[1]
    ktc = {"kv_connector": "CxlkitConnector", "kv_role": "kv_both",
           "kv_connector_module_path": "cxlkit.integrations.vllm",
           "kv_load_failure_policy": "recompute", "kv_connector_extra_config": {
               "pool": f"/dev/shm/{POOL}", "create": host == 0, "size": 1 << 30, "host_id": host}}
    return subprocess.Popen([VLLM, "serve", model, "--host", "127.0.0.1", "--port", str(port),
                             "--load-format", "dummy", "--skip-tokenizer-init", "--dtype",
                             "float32", "--max-model-len", "4096", "--enforce-eager",
                             "--kv-cache-memory-bytes", str(1 << 28), "--kv-transfer-config",
                             json.dumps(ktc)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL), port


def call(port, path, body=None, tries=1):  # 127.0.0.1 only; /health: until the server is up
    for i in range(tries):
        try:
            return urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{port}{path}", data=body and json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}), timeout=300).read().decode()
        except OSError:
            time.sleep(0 if i + 1 == tries else 1)
    raise SystemExit(f"127.0.0.1:{port}{path} did not answer")


model = tempfile.mkdtemp()
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024,
           "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "float32",
           "max_position_embeddings": 4096}, open(f"{model}/config.json", "w"))
prompt, servers, out = [(31 * i + i * i) % 1000 + 1 for i in range(700)], [], {}
try:
    for host in (0, 1):  # B starts once A made the pool
        proc, port = serve(model, host)
        servers.append(proc)
        call(port, "/health", tries=600)
        t = time.perf_counter()
        r = json.loads(call(port, "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 1,
            "return_token_ids": True, "return_tokens_as_token_ids": True}))["choices"][0]
        secs, hits = time.perf_counter() - t, [float(ln.split()[-1]) for ln in call(
            port, "/metrics").splitlines() if ln.startswith("vllm:external_prefix_cache_hits_t")]
        out[host] = {"seconds": round(secs, 3), "pool_hit_tokens": sum(hits), "tokens":
                     r["token_ids"], "logprobs": r["logprobs"]["token_logprobs"]}
        print(f"server {host}: {secs:.3f} s, tokens {r['token_ids']}, "
              f"prompt tokens from the pool: {sum(hits):.0f}")
finally:
    [(s.terminate(), s.wait()) for s in servers]
    [os.unlink(f"/dev/shm/{f}") for f in os.listdir("/dev/shm") if f.startswith(POOL)]
print(json.dumps(out))
