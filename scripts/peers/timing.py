"""The peers' timing: the median over trials of CUDA-event time per call of back-to-back calls,
after three warm-up calls (Triton's autotuner runs in them)."""
import torch


def median_ms(fn, trials=20, reps=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    times.sort()
    return times[len(times) // 2]
