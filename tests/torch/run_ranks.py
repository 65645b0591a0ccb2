#!/usr/bin/env python3
"""Runs one command as every rank of a world on this machine, over loopback, the way torchrun
would: RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT in each process's
environment. Passes when every rank exits 0; prints each rank's output otherwise.
Usage: run_ranks.py N COMMAND [ARG...]"""
import os
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    size, command = int(sys.argv[1]), sys.argv[2:]
    port = str(free_port())
    processes = []
    for rank in range(size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    failed = False
    for rank, process in enumerate(processes):
        output, _ = process.communicate(timeout=900)
        print(f"---- rank {rank} of {size}: exit {process.returncode}\n{output}")
        failed |= process.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
