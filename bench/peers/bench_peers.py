"""``make bench-peers``: the same customer conversations through turnflow, LangGraph's
prebuilt ReAct agent and Parlant, on one scripted OpenAI-compatible server; per framework and
customer turn the model calls, prompt and completion tokens (one tokenizer for all), the
prompt tokens a prefix cache would serve, seconds and the framework's own CPU.

Steps: the scripted server (``scripted_server.py``) starts on a free port and records every
request; each framework's runner runs in its own process (turnflow in the project's
environment, the peers in ``bench/peers/.venv``), tagging each customer turn on the server
first; then llama.cpp's server with the packaged SmolLM2 model starts only to tokenize the
recorded prompts (``/tokenize``); the table, the ratios turnflow / peer per conversation and
the verdict are printed, and everything is kept in ``--out``. Every server started is stopped.

Every conversation whose runner recorded its actions is judged by code (``outcomes.py``): booked
as asked and once, the day changed, paid, nothing unasked, the hours right. With ``--real
MODEL``, turnflow (``turnflow-real``) and LangGraph's agent (``langgraph-real``) run one after
the other on that packaged model through one llama.cpp server, and the targets on it are
printed: more conversations correct, fewer prompt tokens per customer turn as the model read
them, no more seconds per turn. The bench lowers its own priority to nice 19 first, so all it
starts runs below other work on a shared host.

    python -m bench.peers.bench_peers [--frameworks turnflow,turnflow-cache,langgraph,parlant]
        [--peers-python bench/peers/.venv/bin/python] [--out .turnflow/bench-peers]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.harness.ports import free_port
from bench.peers.conversations import CONVERSATIONS
from bench.peers.counting import count, grouped, summarize, table, verdict
from bench.peers.outcomes import (
    judge_rows,
    outcome_table,
    outcome_totals,
    real_table,
    real_verdict,
)

HERE = Path(__file__).resolve().parent
RUNNERS = {"turnflow": ["bench.peers.run_turnflow"],
           # The same agent with the prompt laid out for a prefix cache (and cache_prompt sent).
           "turnflow-cache": ["bench.peers.run_turnflow", "--framework", "turnflow-cache",
                              "--prompt-cache", "llama.cpp"],
           "langgraph": ["bench.peers.run_langgraph"], "parlant": ["bench.peers.run_parlant"],
           "turnflow-real": ["bench.peers.run_turnflow", "--framework", "turnflow-real",
                             "--prompt-cache", "llama.cpp"],
           # The same on the append-only layout (TURNFLOW_MODEL_PROMPT_LAYOUT=append).
           "turnflow-real-append": ["bench.peers.run_turnflow", "--framework",
                                    "turnflow-real-append", "--prompt-cache", "llama.cpp",
                                    "--prompt-layout", "append"],
           "langgraph-real": ["bench.peers.run_langgraph", "--framework", "langgraph-real"],
           "parlant-real": ["bench.peers.run_parlant", "--framework", "parlant-real"]}
REAL = "turnflow-real"
"""turnflow on a real model (``--real``): its calls go on to llama.cpp's server."""
PEER_REAL = "langgraph-real"
"""LangGraph's agent on the same real model, through the same server."""
REALS = (REAL, PEER_REAL)
PARLANT_REAL = "parlant-real"
"""Parlant on the same real model (``--real-frameworks``): minutes a turn here, so only when
asked for."""
REAL_APPEND = "turnflow-real-append"
"""turnflow on the real model in the append-only layout (``--real-frameworks``), beside
``turnflow-real`` on the same server: both run one after the other on the same conversations."""
UPSTREAM = (*REALS, PARLANT_REAL, REAL_APPEND)
"""The rows whose chat calls the scripted server sends on to the real model (embeddings stay
scripted: llama.cpp serves one chat model, and Parlant's retrieval needs an embedding one)."""
OURS = ("turnflow", "turnflow-cache", REAL, REAL_APPEND)
RUN_TIMEOUT_S = {"turnflow": 300, "turnflow-cache": 300, "langgraph": 300, "parlant": 1200,
                 REAL: 3 * 3600, PEER_REAL: 3 * 3600, PARLANT_REAL: 3 * 3600,
                 REAL_APPEND: 3 * 3600}
SOURCE = "script"
"""Every row here is answered by the scripted server, none by a real model."""


class LlamaTokenizer:
    """llama.cpp's ``/tokenize`` of the model it serves, remembering texts seen."""

    def __init__(self, url: str) -> None:
        self.url, self.seen = url, {}

    def __call__(self, text: str) -> list[int]:
        if text not in self.seen:
            data = json.dumps({"content": text, "add_special": False}).encode()
            request = urllib.request.Request(f"{self.url}/tokenize", data=data,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                self.seen[text] = list(json.loads(response.read())["tokens"])
        return self.seen[text]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_server(port: int, record: Path, log: Path,
                 upstream: str | None = None) -> subprocess.Popen[bytes]:
    """The scripted server; with ``upstream``, the real rows' calls go to that server."""
    extra = ["--upstream", upstream, "--upstream-for", ",".join(UPSTREAM)] if upstream else []
    with log.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.peers.scripted_server", "--port", str(port),
             "--record", str(record), *extra], stdout=sink, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + 20
    while not _listening(port):
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise RuntimeError(f"the scripted server did not start: {log.read_text()[-500:]}")
        time.sleep(0.05)
    return child


def run_framework(framework: str, python: str, base_url: str, out: Path,
                  extra: tuple[str, ...] = ()) -> str | None:
    """Run one framework's runner; None when it finished, else why it did not."""
    rows, log = out / f"{framework}.rows.jsonl", out / f"{framework}.log"
    rows.unlink(missing_ok=True)
    if not Path(python).exists():
        return f"{python} is missing: `make bench-peers` creates it"
    with log.open("wb") as sink:
        try:
            done = subprocess.run(
                [python, "-m", *RUNNERS[framework],
                 "--base-url", base_url, "--out", str(rows.resolve()), *extra],
                # Run in the run's own folder: a framework that writes beside itself (Parlant
                # keeps a log in ./parlant-data) leaves it there, not in the checkout.
                stdout=sink, stderr=subprocess.STDOUT, cwd=out.resolve(),
                timeout=RUN_TIMEOUT_S[framework], check=False,
                env={**os.environ, "PYTHONPATH": str(REPO)})
        except subprocess.TimeoutExpired:
            return f"did not finish within {RUN_TIMEOUT_S[framework]} s (log: {log})"
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        return f"exited with {done.returncode}: {' '.join(tail)} (log: {log})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="turnflow,turnflow-cache,langgraph,parlant")
    parser.add_argument("--peers-python", default=str(HERE / ".venv" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=REPO / ".turnflow" / "bench-peers")
    parser.add_argument("--real", default=None, metavar="MODEL",
                        help="also run turnflow and LangGraph's agent on this packaged model "
                        "through llama.cpp (smollm2-135m or qwen2.5-coder-1.5b): the "
                        "turnflow-real and langgraph-real rows")
    parser.add_argument("--real-conversations", default="c01,c05",
                        help="the conversations of the real-model rows, or 'all' (a real "
                        "turn takes seconds to minutes here)")
    parser.add_argument("--real-threads", type=int, default=1,
                        help="llama.cpp's threads for the real model: 1 on a shared host, "
                        "where two threads at the lowest priority wait on each other at every "
                        "step (0.1-0.3 generated tokens a second measured); 2 on a quiet one")
    parser.add_argument("--real-frameworks", default=",".join(REALS),
                        help=f"with --real, which of {', '.join(UPSTREAM)} run on it "
                        f"(default {','.join(REALS)}: {PARLANT_REAL} sends about 29,000 prompt "
                        "tokens a customer turn, minutes a turn here)")
    parser.add_argument("--recount", action="store_true",
                        help="run nothing: count again what a run left in --out")
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = [f for f in frameworks if f not in RUNNERS]
    if unknown or "turnflow" not in frameworks:
        print(f"bench-peers: --frameworks must include turnflow, of {', '.join(RUNNERS)}",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    failed: dict[str, str] = {}
    from tests.fixtures import llama_server  # the project's test extra: xllamacpp

    # Model runs are heavy and the host is shared: everything this bench starts (the
    # frameworks, llama.cpp's servers) runs at the lowest priority, so other work keeps its.
    os.nice(19)
    if args.real and args.real not in llama_server.MODELS:
        print(f"bench-peers: --real must be one of {', '.join(llama_server.MODELS)}",
              file=sys.stderr)
        return 2
    reals = [f for f in args.real_frameworks.split(",") if f] if args.real else []
    if any(f not in UPSTREAM for f in reals):
        print(f"bench-peers: --real-frameworks takes {', '.join(UPSTREAM)}", file=sys.stderr)
        return 2
    if args.recount:
        return report(args, frameworks + reals, {}, llama_server)
    record = args.out / "requests.jsonl"
    record.unlink(missing_ok=True)
    real = None
    if args.real:
        os.environ["TURNFLOW_LOCAL_MODEL"] = args.real
        real = llama_server.start(args.out / "llama-real.log", threads=args.real_threads)
        os.environ.pop("TURNFLOW_LOCAL_MODEL")
        frameworks += reals
    server = start_server(port, record, args.out / "server.log",
                          upstream=real.base_url if real else None)
    try:
        for framework in frameworks:
            python = sys.executable if framework in OURS else args.peers_python
            started = time.perf_counter()
            extra: tuple[str, ...] = ()
            if framework in UPSTREAM and args.real:
                chosen = "" if args.real_conversations == "all" else args.real_conversations
                # LangGraph's and turnflow's limit is a call's; Parlant's a customer turn's (3-4
                # minutes measured here): a turn Parlant gives up on without a word or an error
                # event (its answer failing to parse) is recorded as timed out after it.
                extra = ("--conversations", chosen, "--model", args.real, "--timeout", "900")
                if framework in (REAL, REAL_APPEND):
                    # As a deployment on llama.cpp sets TURNFLOW_MODEL_SLOTS: the server's slots.
                    extra += ("--slots", str(llama_server.PARALLEL_SLOTS))
            why = run_framework(framework, python, base_url, args.out, extra)
            print(f"{framework}: {'done' if why is None else why} "
                  f"({time.perf_counter() - started:.1f} s)", flush=True)
            if why is not None:
                failed[framework] = why
    finally:
        server.terminate()
        server.wait(timeout=10)
        if real is not None:
            real.stop()
    return report(args, frameworks, failed, llama_server)


def report(args: argparse.Namespace, frameworks: list[str], failed: dict[str, str],
           llama_server: Any) -> int:
    """Count the recording in ``args.out`` and print the table, the ratios and the verdict."""
    record = args.out / "requests.jsonl"
    requests = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    rows: list[dict[str, Any]] = []
    for framework in frameworks:
        path = args.out / f"{framework}.rows.jsonl"
        if framework not in failed and path.exists():
            rows += [json.loads(line) for line in path.read_text().splitlines() if line]
    requests = [r for r in requests if r.get("framework") not in failed]
    print(f"chat requests recorded (set-up included): {grouped(requests)}", flush=True)

    with llama_server.running(args.out / "llama-server.log", threads=1) as tokenizer_server:
        counts = count(requests, rows, LlamaTokenizer(tokenizer_server.url))
    summary = summarize(counts)
    ran = [f for f in frameworks if f not in failed]
    turns = sum(len(t) for t in CONVERSATIONS.values())
    print(f"\n{len(CONVERSATIONS)} conversations, {turns} customer turns; every row answered "
          f"by the scripted server but the real model's ({', '.join(UPSTREAM)}); tokens by "
          f"llama.cpp's tokenizer of {llama_server.MODEL_NAME}\n")
    sources = {f: SOURCE for f in ran}
    if args.real:
        for framework in UPSTREAM:
            sources[framework] = f"real model: {llama_server.MODELS[args.real].name}"
    print(table(summary, ran, sources))
    for framework, why in failed.items():
        print(f"| all | {framework} | - | did not run: {why} |")
    judged = judge_rows(rows)
    print("\nOutcomes, judged by code from what each framework did (bench/peers/outcomes.py):\n")
    print(outcome_table(judged))
    print("\n" + outcome_totals(judged))
    if args.real:
        print(f"\nOn the real model ({llama_server.MODELS[args.real].name}), per conversation:\n")
        print(real_table(summary, judged, [f for f in UPSTREAM if f in ran]))
    if args.real and all(f in ran for f in REALS):
        print("\n" + real_verdict(summary, judged, REAL, PEER_REAL))
    ratios, fewer = verdict(summary, "turnflow",
                            [f for f in ran if f not in OURS and f not in UPSTREAM])
    if fewer:
        print("\n" + ratios + "\n")
    for peer, held in fewer.items():
        print(f"turnflow vs {peer}: fewer model calls per customer turn on every conversation: "
              f"{'yes' if held['calls'] else 'no'}; fewer prompt tokens per customer turn on "
              f"every conversation: {'yes' if held['prompt_tokens'] else 'no'}")
    (args.out / "summary.json").write_text(json.dumps(
        {"failed": failed, "conversations": [vars(v) for v in summary.values()],
         "fewer": fewer, "outcomes": [vars(j) for j in judged.values()]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
