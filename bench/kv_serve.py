"""Serving as users measure it: `vllm bench serve` (prefix-repetition workload, fixed request
rate) against two `vllm serve` servers on one pool (hosts 0 and 1) with the cxlkit connector,
and against the same two servers without it. Server A gets the workload first, then server B
the same prompts (same seed): with the connector B loads the prefixes A stored.
Connectors: none, cxlkit (saves on the connector's background thread, its default) and
cxlkit-sync (extra_config async_save false: saves within the engine step).

    .venv-vllm/bin/python bench/kv_serve.py [--prefix-len 2048] [--request-rate 0.5]
        [--connectors none,cxlkit-sync,cxlkit] [--servers AB]

The model is a random-weight Llama with a real (word-level, 1024 tokens) tokenizer made here.
One JSON line per (connector, server): TTFT p50/p99 (ms), request throughput (req/s).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def make_model(path: Path, args) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>"]  # ids 0-2; words t3..t1023 after them
    vocab = {w: i for i, w in enumerate(special + [f"t{i}" for i in range(3, 1024)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
    LlamaConfig(vocab_size=1024, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=16384, bos_token_id=1, eos_token_id=2,
                torch_dtype="float32").save_pretrained(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(model: Path, port: int, host_id: int, pool: str | None, args, log: Path,
          async_save: bool = True):
    cmd = [str(VENV_BIN / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port",
           str(port), "--load-format", "dummy", "--enforce-eager", "--max-model-len",
           str(args.prefix_len + args.suffix_len + args.output_len + 256),
           "--kv-cache-memory-bytes", str(args.kv_bytes), "--seed", "0"]
    if pool:
        cmd += ["--kv-transfer-config", json.dumps({
            "kv_connector": "CxlkitConnector", "kv_role": "kv_both",
            "kv_connector_module_path": "cxlkit.integrations.vllm",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"pool": pool, "create": host_id == 0,
                                          "size": args.pool_bytes, "max_hosts": 2,
                                          "host_id": host_id, "async_save": async_save}})]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve on port {port} exited {proc.returncode}: see {log}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(2)
    stop(proc)
    raise TimeoutError(f"vllm serve on port {port}: not healthy after {args.start_timeout} s")


def stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def bench(model: Path, port: int, out: Path, args) -> dict:
    cmd = [str(VENV_BIN / "vllm"), "bench", "serve", "--backend", "vllm", "--model", str(model),
           "--base-url", f"http://127.0.0.1:{port}", "--dataset-name", "prefix_repetition",
           "--prefix-repetition-prefix-len", str(args.prefix_len),
           "--prefix-repetition-suffix-len", str(args.suffix_len),
           "--prefix-repetition-output-len", str(args.output_len),
           "--prefix-repetition-num-prefixes", str(args.num_prefixes),
           "--num-prompts", str(args.num_prompts), "--request-rate", str(args.request_rate),
           "--seed", "0", "--ignore-eos", "--percentile-metrics", "ttft",
           "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out.parent),
           "--result-filename", out.name]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=args.bench_timeout)
    return json.loads(out.read_text())


def run(label: str, model: Path, work: Path, args) -> None:
    pool = f"/dev/shm/cxlkit-bench-serve-{os.getpid()}" if label != "none" else None
    procs = []
    try:
        ports = [free_port() for _ in args.servers]  # host 0 is A, host 1 is B
        for host, port in enumerate(ports):
            procs.append(serve(model, port, host, pool, args, work / f"{label}-{host}.log",
                               async_save=label != "cxlkit-sync"))
        for host, port in enumerate(ports):
            r = bench(model, port, work / f"{label}-{host}.json", args)
            print(json.dumps({
                "bench": "kv_serve", "connector": label, "server": "AB"[host],
                "ttft_p50_ms": round(r["p50_ttft_ms"], 1),
                "ttft_p99_ms": round(r["p99_ttft_ms"], 1),
                "req_per_s": round(r["request_throughput"], 3), "completed": r["completed"],
                "request_rate": args.request_rate, "prefix_len": args.prefix_len,
                "suffix_len": args.suffix_len, "output_len": args.output_len,
                "num_prompts": args.num_prompts, "num_prefixes": args.num_prefixes,
                "load": os.getloadavg()[0]}), flush=True)
    finally:
        for p in procs:
            stop(p)
        if pool and os.path.exists(pool):
            os.unlink(pool)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix-len", type=int, default=2048)
    ap.add_argument("--suffix-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=8)
    ap.add_argument("--num-prefixes", type=int, default=8)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--request-rate", type=float, default=0.5)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--kv-bytes", type=int, default=256 << 20)
    ap.add_argument("--pool-bytes", type=int, default=1 << 30)
    ap.add_argument("--connectors", default="none,cxlkit-sync,cxlkit")
    ap.add_argument("--servers", default="AB", choices=("A", "AB"),
                    help="A: only the first server (what storing costs), AB: both")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--bench-timeout", type=float, default=1200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kv-serve-") as d:
        work = Path(d)
        model = make_model(work / "model", args)
        for label in args.connectors.split(","):
            run(label, model, work, args)


if __name__ == "__main__":
    main()
