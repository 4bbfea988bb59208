#!/usr/bin/env python3
"""Peer of graph_launch.cu: host time of torch.cuda.CUDAGraph.replay() for graphs of N
small ops (one in-place add on a 1-element tensor each, one kernel per op), timed around
the replay call alone with the stream drained before it, and the GPU time with events."""
import time

import torch


def measure(kernels, iterations=50):
    x = torch.zeros(1, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up before capture, as PyTorch asks
            x.add_(1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            x.add_(1)
    host = gpu = 0.0
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(iterations + 3):
        torch.cuda.synchronize()
        begin.record()
        a = time.perf_counter()
        graph.replay()
        b = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            host += (b - a) * 1e6
            gpu += begin.elapsed_time(end) * 1e3
    return host / iterations, gpu / iterations


def main():
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{'kernels':>8} {'host us':>12} {'gpu us':>12}")
    for kernels in (16, 64, 256, 512, 1024):
        host, gpu = measure(kernels)
        print(f"{kernels:8d} {host:12.2f} {gpu:12.2f}")


if __name__ == "__main__":
    main()
