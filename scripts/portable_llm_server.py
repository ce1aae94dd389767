#!/usr/bin/env python3
"""Serves a GGUF model over llama.cpp's OpenAI-compatible HTTP API through xllamacpp.

The portable runtime of the local extractor: where the prebuilt llama-server of
.deps/llm/llama-server cannot run (its CPU code needs AVX-512, glibc 2.35), this runs the
same llama.cpp HTTP server (/health, /v1/models, /v1/chat/completions with response_format
json_schema, ...) inside a Python process, with xllamacpp's build for AVX2; measured here it
generates about as fast and reads prompts about half as fast. Run it with the interpreter of
the virtual environment scripts/setup installs:

    .deps/llm/portable-venv/bin/python scripts/portable_llm_server.py \\
        -m .deps/llm/model.gguf --host 127.0.0.1 --port 8997 -t 2 -c 2048 -np 1

It takes llama-server's essential arguments, with the same meaning, and refuses any other.
/health answers 503 while the model loads, 200 once it serves. SIGTERM or SIGINT ends it at
once: with status 0 once it serves, by the signal while it loads. If the model cannot load
(or the server cannot start) it exits 1, the last line on stderr saying why in one line,
after llama.cpp's own log.
"""

import argparse
import errno
import os
import signal
import socket
import sys
import threading

PROG = "portable_llm_server"


def fail(reason):
    print(f"{PROG}: {reason}", file=sys.stderr, flush=True)
    sys.exit(1)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", required=True, help="the GGUF model file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
    parser.add_argument("-t", "--threads", type=int, default=-1,
                        help="threads for generation (-1: llama.cpp's default)")
    parser.add_argument("-tb", "--threads-batch", type=int, default=-1,
                        help="threads for prompt processing (-1: as --threads)")
    parser.add_argument("-c", "--ctx-size", type=int, default=0,
                        help="context size, shared by the slots (0: the model's)")
    parser.add_argument("-np", "--parallel", type=int, default=1, help="number of slots (1)")
    parser.add_argument("-a", "--alias", help="model name in /v1/models (the file's name)")
    parser.add_argument("--no-webui", "--no-ui", action="store_true",
                        help="accepted for llama-server's sake: there is never a Web UI here")
    return parser.parse_args(argv)


def check_model(path):
    """The reasons llama.cpp would fail to load the file that can be told in one line."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        fail(f"cannot load the model {path}: {e.strerror}")
    if magic != b"GGUF":
        fail(f"cannot load the model {path}: not a GGUF file")


def check_port(host, port):
    """Fails early, with a clear reason, when the address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror}")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            reason = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror
            fail(f"cannot listen on {host}:{port}: {reason}")


def main(argv):
    args = parse_args(argv)
    check_model(args.model)
    check_port(args.host, args.port)
    # llama.cpp's threads meet at OpenMP barriers, where libgomp spins by default. On a CPU
    # shared with other work (the service's own, at a higher priority) a spinning thread holds
    # the core its partner needs: generation measured 0.3 tokens/s with 2 threads on 2 busy
    # cores, against 4.7 when they sleep at the barrier. libgomp reads this when it loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import xllamacpp
    except ImportError as e:
        fail(f"cannot import xllamacpp ({e}); run it with .deps/llm/portable-venv/bin/python")

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    # llama-server takes the batch threads from -t unless -tb is given; CommonParams does not.
    params.cpuparams_batch.n_threads = args.threads_batch if args.threads_batch > 0 else args.threads
    params.ui = False
    if args.alias:
        params.model_alias = {args.alias}

    # xllamacpp.Server(params) starts llama.cpp's HTTP server on a thread of its own (it answers
    # /health with 503 at once), loads the model and returns once it serves, or raises
    # RuntimeError if either failed. Until then SIGTERM and SIGINT keep their default action,
    # ending the process at once: there is nothing to clean up.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        server = xllamacpp.Server(params)
    except (RuntimeError, ValueError) as e:
        fail(f"cannot load the model {args.model} (llama.cpp's log above says why): {e}")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"{PROG}: serving {args.model} at {server.listening_address}", file=sys.stderr, flush=True)
    stop.wait()

    # Then it ends at once. Deleting the server would stop llama.cpp's loop and join its
    # threads, but holding the GIL until a request in flight ends (its client disconnects):
    # measured 118 s. Nothing it holds needs closing: clients see the connection drop, as
    # with llama-server killed.
    print(f"{PROG}: stopping", file=sys.stderr, flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
