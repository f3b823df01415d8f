"""``python -m agentpool.sim.apiserver``: serve an emulated API until Ctrl-C.

For demos and manual poking with kubectl; tests start :class:`ApiEmulator`
in-process instead.
"""

from __future__ import annotations

import argparse
import signal
import threading

from agentpool.sim.apiserver.emulator import ApiEmulator
from agentpool.sim.apiserver.resources import SHAPES


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentpool.sim.apiserver", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig pointing at the emulator here")
    parser.add_argument(
        "--shape", default="profiles", choices=sorted(SHAPES),
        help="which kinds to serve: every one, one Joulie API generation, or no Joulie CRD",
    )
    args = parser.parse_args(argv)

    done = threading.Event()
    # Handlers only record the signal; the main thread does the stopping.
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with ApiEmulator(port=args.port, host=args.host, shape=args.shape) as emu:
        if args.kubeconfig:
            emu.write_kubeconfig(args.kubeconfig)
        print(f"serving the Kubernetes API emulator at {emu.url}", flush=True)
        if args.kubeconfig:
            print(f"kubeconfig: {args.kubeconfig}", flush=True)
        done.wait()


if __name__ == "__main__":
    main()
