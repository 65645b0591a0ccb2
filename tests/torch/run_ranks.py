#!/usr/bin/env python3
"""Runs one command as every rank of a world on this machine, over loopback, the way torchrun
would: RANK, WORLD_SIZE and MASTER_ADDR=127.0.0.1 in each process's environment. Rank 0 starts
first with MASTER_PORT 0 and prints "rank 0 listening at port N" once the OS has given its
rendezvous a port; the other ranks start with MASTER_PORT N (a port probed free here and handed
over could be taken by another process in between). Passes when every rank exits 0; prints
each rank's output otherwise. Usage: run_ranks.py N COMMAND [ARG...]"""
import os
import re
import subprocess
import sys


def start(command, rank, size, port):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    size, command = int(sys.argv[1]), sys.argv[2:]
    processes = [start(command, 0, size, 0)]
    before = ""  # rank 0's output up to the port
    for line in processes[0].stdout:
        before += line
        if found := re.search(r"rank 0 listening at port (\d+)", line):
            processes += [start(command, rank, size, found.group(1)) for rank in range(1, size)]
            break
    else:
        print(f"rank 0 ended without saying where it listens:\n{before}")
    failed = len(processes) != size
    for rank, process in enumerate(processes):
        output, _ = process.communicate(timeout=900)  # hang guard: the whole world takes a few minutes
        print(f"---- rank {rank} of {size}: exit {process.returncode}\n{before if rank == 0 else ''}{output}")
        failed |= process.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
