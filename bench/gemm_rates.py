#!/usr/bin/env python3
"""gemm_rates.py: measures bf16 GEMM rates with PyTorch (cuBLAS) for the shapes `boost project
--gemms` lists, and prints them as the results rows `boost project` reads:
    | gemm | GPU | M | N | K | TFLOPS |
Input on stdin: lines "LAYOUT m n k batch count" (or "m n k"); each distinct (m, n, k) is timed once
as one C[m,n] = A[m,k] @ B[k,n] (batch 1). Usage (on a GPU machine):
    ./bin/boost project cola-7b-tp4 -D gpu=h200 --gemms | python3 bench/gemm_rates.py --gpu h200
--device cpu runs the same loop on the CPU (float32, for testing the script, not for rates)."""
import argparse
import sys
import time


def parse_shapes(lines):
    """Distinct (m, n, k) in first-seen order; malformed lines are an error with their number."""
    seen, shapes = set(), []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        nums = fields[1:4] if not fields[0].isdigit() else fields[0:3]
        try:
            m, n, k = (int(x) for x in nums)
        except ValueError:
            raise SystemExit(f"<stdin>:{number}: expected 'LAYOUT m n k ...' or 'm n k', got: {line.strip()}")
        if min(m, n, k) <= 0:
            raise SystemExit(f"<stdin>:{number}: m, n and k must be positive")
        if (m, n, k) not in seen:
            seen.add((m, n, k))
            shapes.append((m, n, k))
    return shapes


def time_gemm(torch, m, n, k, device, min_seconds):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    c = torch.empty(m, n, device=device, dtype=dtype)
    for _ in range(3):                                   # warm-up: cuBLAS heuristics, clocks
        torch.matmul(a, b, out=c)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    iters, elapsed = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds or iters >= 1 << 14:
            break
        iters *= 2
    return 2.0 * m * n * k * iters / elapsed / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", required=True, help="the GPU file's name the rows are for (a100, h100, h200)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--min-seconds", type=float, default=0.05, help="time each shape at least this long")
    ap.add_argument("--max-shapes", type=int, default=200)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("gemm_rates.py: PyTorch is not installed here (pip install torch), nothing measured")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gemm_rates.py: PyTorch finds no CUDA device, nothing measured")
    shapes = parse_shapes(sys.stdin)[: args.max_shapes]
    if not shapes:
        raise SystemExit("gemm_rates.py: no shapes on stdin (pipe in 'boost project RUN --gemms')")
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (float32, not a rate)"
    print(f"<!-- GEMM rates measured with PyTorch {torch.__version__} torch.matmul on {where} -->")
    for m, n, k in shapes:
        tflops = time_gemm(torch, m, n, k, args.device, args.min_seconds)
        print(f"| gemm | {args.gpu} | {m} | {n} | {k} | {tflops:.4g} |", flush=True)


if __name__ == "__main__":
    main()
