#!/usr/bin/python3
"""mpijob-worker against PyTorch DistributedDataParallel on the same model, CPU or GPU.

Both sides train the same multi-layer perceptron (ReLU hidden layers, linear output, mean
squared error, plain SGD) from the same initial weights on the same synthetic data (the worker's,
written by `mpijob-worker train --export`), with the same global batch, steps, warm-up and
ranks, one compute thread per rank, so their losses agree up to float rounding (printed):
  - worker:  mpirun --allow-run-as-root --oversubscribe -np N --bind-to none
             build/bin/mpijob-worker train --backend mpi ... (--threads 1 when train has it);
  - PyTorch: N processes (torch.multiprocessing), gloo over loopback (file:// rendezvous,
             GLOO_SOCKET_IFNAME=lo), DistributedDataParallel (25 MiB buckets, gradients as
             bucket views), torch.optim.SGD; torch.set_num_threads(1) and
             OPENBLAS_NUM_THREADS=1 in every rank.
The two alternate (worker first in odd rounds, PyTorch first in even ones), for each model
and rank count, in every round. Figures are medians over the rounds; the ratio is
worker / PyTorch samples/s, taken per round and then the median.

Timing, the same on both sides: the first --warmup steps are left out; samples/s is
global batch x timed steps / time of those steps on rank 0. The worker's summary line leaves
out its first step; with --log-every W-1 its step line at step W-1 covers steps 1 to W-1, and
the timed part is the summary's time less that line's.

PyTorch must run on OpenBLAS: Debian's python3-torch calls whatever libblas.so.3 the
alternatives select, and the reference BLAS there is more than ten times slower, which
would flatter the worker. The script checks the BLAS mapped into every PyTorch rank and
refuses to report anything else.

With --device cuda the same comparison runs on GPUs: the worker with --backend nccl (cuBLAS,
NCCL), PyTorch with the nccl process group, each rank on GPU (rank mod GPUs), the data on the
GPU on both sides, and the timed steps ended by a device synchronisation on both sides (the
worker's step and summary lines read the loss back). With more ranks than GPUs, each rank is
made a host of its own for NCCL (NCCL_HOSTID=bench-host-<rank>, sockets over loopback), on both
sides alike: NCCL before 2.30 refuses two ranks of one host on one GPU, and this is how a
one-GPU machine measures NCCL's network path.

Figures only: nothing here judges a timing. Exit 0 when every run completed, 1 when a run
failed, 2 when it cannot measure (no PyTorch, not OpenBLAS, no worker).

Usage: /usr/bin/python3 tests/bench/bench_ddp.py [--rounds 3] [--ranks 1 2]
           [--models default large] [--steps 120] [--warmup 5] [--batch 2048]
           [--samples 8192] [--device cpu|cuda]
Environment: MPIRUN_ARGS (added to every mpirun line).
"""
import os

# One BLAS and OpenMP thread per rank, before torch and its BLAS are loaded: here, in the
# PyTorch ranks (they inherit the environment) and in the worker's ranks.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import ctypes  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = {
    "default": {"input": 128, "hidden": 256, "layers": 3, "output": 8},
    "large": {"input": 128, "hidden": 1024, "layers": 4, "output": 8},
}
LR = 0.05
SAMPLES = 8192  # the worker's default dataset size, sharded by rank on both sides (--samples)
SEED = 1


def parameters(m):
    n, width = 0, m["input"]
    for _ in range(m["layers"]):
        n += width * m["hidden"] + m["hidden"]
        width = m["hidden"]
    return n + width * m["output"] + m["output"]


# ---- the BLAS PyTorch runs on -------------------------------------------------------------

def mapped_blas():
    """The BLAS and LAPACK libraries mapped into this process, as real paths."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/"):
                base = os.path.basename(fields[5])
                if "blas" in base or "lapack" in base:
                    paths.add(os.path.realpath(fields[5]))
    return sorted(paths)


def blas_report():
    """What this process's torch multiplies matrices with: a dict, with 'problem' set when
    it is not OpenBLAS with one thread."""
    import torch
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    torch.mm(a, b)  # the BLAS is loaded and used from here on
    libs = mapped_blas()
    cores = [p for p in libs if os.path.basename(p).startswith("libopenblas")]
    others = [p for p in libs if os.path.basename(p).startswith("libblas")
              and "openblas" not in p]
    info = {"libraries": libs}
    if not cores or others:
        info["problem"] = ("torch's BLAS is not OpenBLAS (mapped: %s); install "
                           "libopenblas0-pthread and let `update-alternatives --config "
                           "libblas.so.3-x86_64-linux-gnu` select it" % (", ".join(libs) or "none"))
        return info
    lib = ctypes.CDLL(cores[0])
    lib.openblas_get_config.restype = ctypes.c_char_p
    info["config"] = lib.openblas_get_config().decode()
    info["threads"] = lib.openblas_get_num_threads()
    info["torch_threads"] = torch.get_num_threads()
    if info["threads"] != 1 or info["torch_threads"] != 1:
        info["problem"] = ("%d OpenBLAS and %d torch threads, want 1 and 1"
                           % (info["threads"], info["torch_threads"]))
    return info


def sgemm_gflops(torch, n=1024, reps=5):
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2.0 * n ** 3 / best / 1e9


# ---- the problem both sides train ----------------------------------------------------------

def problem_flags(m, args):
    """train's flags that define the problem: the worker trains with them, and exports with them
    what PyTorch trains."""
    return ["--input", str(m["input"]), "--hidden", str(m["hidden"]),
            "--layers", str(m["layers"]), "--output", str(m["output"]),
            "--batch", str(args.batch), "--steps", str(args.steps), "--lr", str(LR),
            "--samples", str(args.samples), "--seed", str(SEED)]


def export_problem(worker, m, args, directory):
    """The worker writes its initial weights and data (train --export); returns problem.json."""
    cmd = [worker, "train"] + problem_flags(m, args) + ["--export", directory]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    with open(os.path.join(directory, "problem.json")) as f:
        prob = json.load(f)
    prob["dir"] = directory
    return prob


def problem_floats(prob, name):
    """One of the problem's float32 arrays, flat."""
    import torch
    with open(os.path.join(prob["dir"], prob["files"][name]), "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=torch.float32)


# ---- one PyTorch run ------------------------------------------------------------------------

def torch_rank(rank, world, init_file, cfg, results):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already fixed in this process
    cuda = cfg["device"] == "cuda"
    if cfg.get("hosts"):
        os.environ["NCCL_HOSTID"] = "bench-host-%d" % rank
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    dev = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
        # Plain FP32 on both sides: the worker's cuBLAS runs with CUBLAS_DEFAULT_MATH.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl" if cuda else "gloo", init_method="file://" + init_file,
                            rank=rank, world_size=world)
    m, batch, steps, warmup = cfg["model"], cfg["batch"], cfg["steps"], cfg["warmup"]
    local = batch // world

    # The worker's own problem (train --export): its initial weights, and the global batch of
    # every distinct step, of which this rank takes its contiguous slice, as the worker's ranks do.
    prob = cfg["problem"]
    windows = prob["windows"]
    x = problem_floats(prob, "x").view(windows, batch, m["input"])
    y = problem_floats(prob, "y").view(windows, batch, m["output"])
    x = x[:, rank * local:(rank + 1) * local].contiguous().to(dev)
    y = y[:, rank * local:(rank + 1) * local].contiguous().to(dev)
    params = problem_floats(prob, "params")

    layers, width = [], m["input"]
    for _ in range(m["layers"]):
        layers += [torch.nn.Linear(width, m["hidden"]), torch.nn.ReLU()]
        width = m["hidden"]
    layers.append(torch.nn.Linear(width, m["output"]))
    linears = [mod for mod in layers if isinstance(mod, torch.nn.Linear)]
    with torch.no_grad():
        for mod, spec in zip(linears, prob["layer"]):
            w, b = spec["weight_offset"], spec["bias_offset"]
            mod.weight.copy_(params[w:w + spec["in"] * spec["out"]].view(spec["out"], spec["in"]))
            mod.bias.copy_(params[b:b + spec["out"]])
    model = DistributedDataParallel(torch.nn.Sequential(*layers).to(dev), bucket_cap_mb=25,
                                    gradient_as_bucket_view=True,
                                    device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step(s):
        opt.zero_grad()
        # Mean over the local batch and outputs, averaged over the ranks by DDP: the mean over
        # the global batch, as the worker's loss.
        loss = F.mse_loss(model(x[s % windows]), y[s % windows])
        loss.backward()
        opt.step()
        return loss.detach()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    first = step(0)
    for s in range(1, warmup):
        step(s)
    sync()
    start = time.perf_counter()
    for s in range(warmup, steps):
        last = step(s)
    sync()
    wall = time.perf_counter() - start

    losses = torch.stack([first, last]) / world
    dist.all_reduce(losses)
    blas = {} if cuda else blas_report()
    results.put({"rank": rank, "wall_s": wall, "loss_first": float(losses[0]),
                 "loss_last": float(losses[1]), "blas": blas})
    dist.destroy_process_group()


def loopback_name():
    for _, name in socket.if_nameindex():
        if name == "lo" or name.startswith("lo"):
            return name
    return "lo"


def hosts_per_rank(ranks, args):
    """Whether each rank must be a host of its own: more ranks than GPUs."""
    if args.device != "cuda":
        return False
    import torch
    return ranks > torch.cuda.device_count()


def run_torch(m, ranks, args, prob):
    import torch.multiprocessing as mp
    cfg = {"model": m, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
           "device": args.device, "hosts": hosts_per_rank(ranks, args), "problem": prob}
    tmp = tempfile.mkdtemp(prefix="mpijob-bench-ddp.")
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    try:
        mp.spawn(torch_rank, args=(ranks, os.path.join(tmp, "rendezvous"), cfg, results),
                 nprocs=ranks, join=True)
    except Exception as e:  # a rank failed: its traceback went to stderr
        return {"error": "PyTorch at %d ranks: %s" % (ranks, str(e).strip().splitlines()[-1])}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [results.get() for _ in range(ranks)]
    for r in rows:
        if "problem" in r["blas"]:
            return {"refuse": "PyTorch rank %d: %s" % (r["rank"], r["blas"]["problem"])}
    r0 = next(r for r in rows if r["rank"] == 0)
    timed = args.steps - args.warmup
    return {"samples_per_sec": args.batch * timed / r0["wall_s"], "wall_s": r0["wall_s"],
            "loss_first": r0["loss_first"], "loss_last": r0["loss_last"]}


# ---- one worker run -------------------------------------------------------------------------

def worker_has_threads(worker):
    out = subprocess.run([worker, "train", "--help"], capture_output=True, text=True)
    return "--threads" in out.stdout + out.stderr


def worker_command(worker, m, ranks, args, threads):
    backend = "nccl" if args.device == "cuda" else "mpi"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
           "--bind-to", "none"] + shlex.split(os.environ.get("MPIRUN_ARGS", ""))
    if hosts_per_rank(ranks, args):
        # The rank is known only inside each process: a shell sets NCCL_HOSTID from it.
        cmd += ["sh", "-c", 'NCCL_HOSTID=bench-host-$OMPI_COMM_WORLD_RANK '
                'NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} exec "$0" "$@"']
    cmd += [worker, "train", "--backend", backend] + problem_flags(m, args) + [
        "--log-every", str(args.warmup - 1), "--check-every", "0"]
    if threads and backend == "mpi":
        cmd += ["--threads", "1"]
    return cmd


def run_worker(cmd, args):
    p = subprocess.run(cmd, capture_output=True, text=True)
    summary, warm = None, None
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if o.get("event") == "summary":
            summary = o
        elif o.get("event") == "step" and o.get("step") == args.warmup - 1:
            warm = o
    if p.returncode != 0 or summary is None or (args.warmup > 1 and warm is None):
        tail = (p.stdout + p.stderr).strip().splitlines()[-5:]
        return {"error": "worker exited %d: %s" % (p.returncode, " | ".join(tail))}
    # The summary covers steps 1 .. steps-1; the step line at warmup-1, steps 1 .. warmup-1.
    b = args.batch
    wall = (args.steps - 1) * b / summary["samples_per_sec"]
    if warm is not None:
        wall -= (args.warmup - 1) * b / warm["samples_per_sec"]
    return {"samples_per_sec": b * (args.steps - args.warmup) / wall, "wall_s": wall,
            "loss_first": summary["loss_first"], "loss_last": summary["loss_last"]}


# ---- the report -----------------------------------------------------------------------------

def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def worker_gemm(worker):
    """OpenBLAS when the worker links it, else its own GEMM."""
    out = subprocess.run(["ldd", worker], capture_output=True, text=True).stdout
    libs = [line.split()[0] for line in out.splitlines() if "blas" in line]
    return "BLAS (%s)" % ", ".join(libs) if libs else "built-in GEMM (no BLAS linked)"


def fmt(v):
    return "{:,.0f}".format(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["default", "large"], choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=2048, help="global batch")
    ap.add_argument("--steps", type=int, default=120, help="steps, warm-up included")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="dataset size, both sides")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu: worker --backend mpi against gloo; cuda: --backend nccl "
                    "against nccl")
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "bin", "mpijob-worker"))
    args = ap.parse_args()
    if not 1 <= args.warmup <= args.steps - 2:
        ap.error("--warmup must be between 1 and --steps - 2")
    for n in args.ranks:
        if args.batch % n or args.samples % args.batch:
            ap.error("the batch must divide by every rank count, and --samples (%d) by the "
                     "batch" % args.samples)

    try:
        import torch
    except ImportError as e:
        print("cannot measure: PyTorch is not importable by %s (%s); Debian's python3-torch "
              "installs it for /usr/bin/python3 (scripts/install-deps.sh bench)"
              % (sys.executable, e))
        return 2
    if not os.access(args.worker, os.X_OK):
        print("cannot measure: %s is not built (make build/bin/mpijob-worker)" % args.worker)
        return 2
    if shutil.which("mpirun") is None:
        print("cannot measure: mpirun not found (Open MPI)")
        return 2
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print("cannot measure: --device cuda but torch sees no GPU")
            return 2
        gpus = torch.cuda.device_count()
        peer = "%s, nccl %s, %d GPU%s: %s" % (
            torch.__version__, ".".join(map(str, torch.cuda.nccl.version())), gpus,
            "s" if gpus > 1 else "", torch.cuda.get_device_name(0))
    else:
        blas = blas_report()
        if "problem" in blas:
            print("refusing to report: " + blas["problem"])
            return 2
        os.environ["GLOO_SOCKET_IFNAME"] = loopback_name()
        peer = "%s (%s), gloo over %s, %s, %d thread; sgemm 1024: %.1f GFLOP/s" % (
            torch.__version__, os.path.dirname(torch.__file__), os.environ["GLOO_SOCKET_IFNAME"],
            blas["config"], blas["threads"], sgemm_gflops(torch))

    threads = worker_has_threads(args.worker)
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True,
                         text=True).stdout.splitlines()[:1]
    machine = "%d CPUs, %s, %s %s" % (os.cpu_count(), cpu_model(), platform.system(),
                                     platform.release())
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    print("machine: " + machine)
    print("date:    " + date)
    print("load:    %s (1, 5, 15 min)" % load())
    print("mpi:     " + (mpi[0] if mpi else "unknown"))
    if cuda:
        print("worker:  %s, --backend nccl" % args.worker)
    else:
        print("worker:  %s, %s, --threads 1: %s" % (args.worker, worker_gemm(args.worker),
                                                   "yes" if threads else "not an option"))
    print("pytorch: " + peer)
    print("work:    global batch %d, %d steps, the first %d left out, lr %g, %d samples; "
          "%d rounds; %s" % (args.batch, args.steps, args.warmup, LR, args.samples, args.rounds,
                              args.device))
    for name in args.models:
        m = MODELS[name]
        print("model %-7s %d inputs, %d hidden layers of %d, %d outputs: %s parameters"
              % (name, m["input"], m["layers"], m["hidden"], m["output"], fmt(parameters(m))))
    print("worker command (1 rank, default model): "
          + " ".join(worker_command("build/bin/mpijob-worker", MODELS[args.models[0]],
                                    1, args, threads)))

    # Both sides train the same problem: the worker's initial weights and data, exported once.
    work = tempfile.mkdtemp(prefix="mpijob-bench-ddp-problem.")
    try:
        problems = {name: export_problem(args.worker, MODELS[name], args, os.path.join(work, name))
                    for name in args.models}
    except RuntimeError as e:
        shutil.rmtree(work, ignore_errors=True)
        print("cannot measure: the worker did not export the problem: %s" % e)
        return 2
    try:
        return compare(args, problems, threads, peer, machine, date)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(args, problems, threads, peer, machine, date):
    """The rounds, the table and the summary line; the exit status."""
    cuda = args.device == "cuda"
    runs = {}  # (model, ranks) -> {"worker": [...], "pytorch": [...], "ratio": [...]}
    losses_seen = {}  # (model, ranks) -> {"worker": [...], "pytorch": [...]}: the last step's
    failed = []
    for rnd in range(1, args.rounds + 1):
        print("\n== round %d of %d (load %s)" % (rnd, args.rounds, load()))
        for name in args.models:
            m = MODELS[name]
            for n in args.ranks:
                sides = ["worker", "pytorch"] if rnd % 2 else ["pytorch", "worker"]
                got = {}
                for side in sides:
                    if side == "worker":
                        r = run_worker(worker_command(args.worker, m, n, args, threads), args)
                    else:
                        r = run_torch(m, n, args, problems[name])
                    if "refuse" in r:
                        print("refusing to report: " + r["refuse"])
                        return 2
                    got[side] = r
                row = runs.setdefault((name, n), {"worker": [], "pytorch": [], "ratio": []})
                losses = losses_seen.setdefault((name, n), {"worker": [], "pytorch": []})
                parts = []
                for side in ("worker", "pytorch"):
                    r = got[side]
                    if "error" in r:
                        failed.append(r["error"])
                        parts.append("%s FAILED: %s" % (side, r["error"]))
                        continue
                    row[side].append(r["samples_per_sec"])
                    losses[side].append(r["loss_last"])
                    parts.append("%s %9s samples/s (%5.1f s, loss %.3g -> %.3g)"
                                 % (side, fmt(r["samples_per_sec"]), r["wall_s"],
                                    r["loss_first"], r["loss_last"]))
                ratio = ""
                if "error" not in got["worker"] and "error" not in got["pytorch"]:
                    row["ratio"].append(got["worker"]["samples_per_sec"]
                                        / got["pytorch"]["samples_per_sec"])
                    ratio = "  ratio %.2f" % row["ratio"][-1]
                print("%-7s %d rank%s  %s%s" % (name, n, "s" if n > 1 else " ",
                                                "  ".join(parts), ratio), flush=True)

    print("\n== worker / PyTorch DDP on %s, global batch %d, samples/s, median of %d rounds "
          "(%s; %s)" % (args.device, args.batch, args.rounds, peer if cuda else machine, date))
    print("| model | ranks | worker samples/s | PyTorch DDP samples/s | ratio worker / PyTorch |")
    print("|---|---|---|---|---|")
    summary = []
    for (name, n), row in runs.items():
        med = {k: statistics.median(v) if v else None for k, v in row.items()}
        cell = lambda k: fmt(med[k]) if med[k] is not None else "failed"  # noqa: E731
        ratio = ("**%.2f** (%.2f to %.2f)" % (med["ratio"], min(row["ratio"]), max(row["ratio"]))
                 if row["ratio"] else "-")
        print("| %s | %d | %s | %s | %s |" % (name, n, cell("worker"), cell("pytorch"), ratio))
        summary.append({"model": name, "ranks": n, "parameters": parameters(MODELS[name]),
                        "worker_samples_per_sec": med["worker"],
                        "pytorch_samples_per_sec": med["pytorch"], "ratio": med["ratio"],
                        "rounds": {k: [round(x, 3) for x in v] for k, v in row.items()}})
    # The same problem on both sides: the losses must agree, up to float rounding (the sums
    # run in another order) compounded over the steps.
    print("\nloss at the last step, worker / PyTorch (the same weights and data on both sides):")
    for (name, n), seen in losses_seen.items():
        if seen["worker"] and seen["pytorch"]:
            w, t = seen["worker"][-1], seen["pytorch"][-1]
            print("  %-7s %d rank%s  %.7g / %.7g  (relative difference %.1e)"
                  % (name, n, "s" if n > 1 else " ", w, t, abs(w - t) / max(abs(t), 1e-30)))
    for item in summary:
        seen = losses_seen.get((item["model"], item["ranks"]), {})
        item["loss_last"] = {k: (v[-1] if v else None) for k, v in seen.items()}
    print(json.dumps({"event": "summary", "bench": "ddp", "machine": machine, "date": date,
                      "device": args.device, "peer": peer, "global_batch": args.batch, "steps": args.steps, "warmup": args.warmup,
                      "runs": summary}))
    for e in failed:
        print("FAIL: " + e)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
