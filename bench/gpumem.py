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


class ClockPoll:
    """nvidia-smi sampling GPU `gpu`'s SM clock, power draw, temperature and active clock-limiting
    reasons every `every_ms` while a `with` block runs: the clock a contender's sustained work holds
    (the samples slow a host-paced forward slightly, so no timed figure is taken under it).
    .summary() gives the medians over the samples under load (power above a third of the largest)."""
    QUERY = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"

    def __init__(self, gpu=0, every_ms=100):
        self.gpu, self.every_ms, self.samples, self.proc = gpu, every_ms, [], None

    def __enter__(self):
        q = ["nvidia-smi", "-i", str(self.gpu), "--format=csv,noheader,nounits"]
        try:
            # Older drivers name the reasons clocks_throttle_reasons: without them where the query is refused.
            query = self.QUERY if subprocess.run(q + [f"--query-gpu={self.QUERY}"], capture_output=True, timeout=10).returncode == 0 \
                else self.QUERY.rsplit(",", 1)[0]
            self.proc = subprocess.Popen(q + [f"--query-gpu={query}", "-lms", str(self.every_ms)], stdout=subprocess.PIPE, text=True)
        except (FileNotFoundError, subprocess.TimeoutExpired):
            self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return False
        self.proc.terminate()
        for line in self.proc.communicate()[0].splitlines():
            f = [x.strip() for x in line.split(",")]
            try:
                self.samples.append({"sm_mhz": float(f[0]), "power_w": float(f[1]), "temp_c": float(f[2]),
                                     "reasons": f[3] if len(f) > 3 else "not reported"})
            except (ValueError, IndexError):
                continue
        return False

    def summary(self):
        """{"samples", "sm_mhz", "power_w", "temp_c_max", "reasons"} over the loaded samples, or None."""
        import statistics
        if not self.samples:
            return None
        top = max(s["power_w"] for s in self.samples)
        busy = [s for s in self.samples if s["power_w"] >= top / 3]
        return {"samples": len(busy), "sm_mhz": statistics.median(s["sm_mhz"] for s in busy),
                "sm_mhz_min": min(s["sm_mhz"] for s in busy), "power_w": statistics.median(s["power_w"] for s in busy),
                "temp_c_max": max(s["temp_c"] for s in busy), "reasons": sorted({s["reasons"] for s in busy})}


def clock_line(who, c):
    """One printed line of a ClockPoll summary."""
    if not c:
        return f"{who}: no clock samples (no nvidia-smi)"
    return (f"{who}: SM clock median {c['sm_mhz']:.0f} MHz (lowest {c['sm_mhz_min']:.0f}), power median {c['power_w']:.0f} W, "
            f"up to {c['temp_c_max']:.0f} C, limiting reasons {', '.join(c['reasons'])} ({c['samples']} samples)")
