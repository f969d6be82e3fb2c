"""Device memory in use as nvidia-smi reports it, and a thread that keeps its peak while another
process runs: how the benchmarks measure the peak memory of runs in other processes."""
import subprocess
import threading
import time


def used_mib(gpu=None):
    """MiB in use on GPU `gpu`, or over every GPU; 0 where there is no nvidia-smi (a CPU dry run)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout.split()
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return 0
    v = [int(x) for x in out if x.isdigit()]
    if gpu is None:
        return sum(v)
    return v[gpu] if gpu < len(v) else 0


_START = []


def mark_start():
    """Remembers the device memory in use before this process touched the GPU: the baseline of a
    whole-process peak taken in this process (wan_forward.diffusers_contenders' eager_process_peak_gib).
    Call it before anything initialises CUDA."""
    _START[:] = [used_mib(0)]


def process_start_mib():
    """What mark_start saw, or None when it was not called."""
    return _START[0] if _START else None


class MemPoll(threading.Thread):
    """The peak of used_mib(gpu) until .stop is set."""

    def __init__(self, gpu=None, every_s=0.02):
        super().__init__(daemon=True)
        self.gpu, self.every_s = gpu, every_s
        self.peak, self.stop = 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, used_mib(self.gpu))
            time.sleep(self.every_s)
