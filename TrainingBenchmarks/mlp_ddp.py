"""Data-parallel MLP training: DistributedDataParallel around mlp.py's network, world_size ranks, instrumented.

``python TrainingBenchmarks/mlp_ddp.py --world-size 2`` starts itself under torchrun (``--nproc-per-node``,
as an argument list) and each rank trains on its own shard of synthetic batches; a rank started by torchrun or
as a Slurm task (``SLURM_PROCID``) trains directly. Each rank profiles its batches with the same context
manager: rank 0 into the profile folder dlbench gave (and, under dlbench, logs the run), rank r into
``<that folder>/rank<r>``; no other rank publishes anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dlbench.core.ranks import free_port, rank_place, threads_per_rank

PROFILE_DIR = "DLBENCH_PROFILE_DIR"
#: environment variables only rank 0 keeps: the run it logs into, the progress file dlbench polls, the export
RANK_ZERO_ONLY = ("MLFLOW_RUN_ID", "DLBENCH_PROGRESS_FILE", "DLBENCH_EXPORT_ONNX")


def rank_and_world() -> tuple[int, int, int] | None:
    """rank, world size, local world size from torchrun's or Slurm's variables (:mod:`dlbench.core.ranks`); None
    outside a process group, and for a single Slurm task (it starts its ``--world-size`` ranks itself)."""
    if "RANK" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return None
    place = rank_place()
    return None if place is None else (place.rank, place.world_size, place.local_world_size)


def world_size_argument(argv: list[str]) -> int:
    for i, arg in enumerate(argv):
        if arg == "--world-size" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--world-size="):
            return int(arg.split("=", 1)[1])
    return 1


def launch_ranks(world_size: int) -> int:
    """torchrun with ``world_size`` ranks on this machine, each running this script."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}"]
    return subprocess.call([*command, str(Path(__file__).resolve()), *sys.argv[1:]])


def bucket_limits_mb(ddp: object) -> tuple[float, float]:
    """DDP's bucket limit and its first bucket's, in MiB: the first is 1 MiB only when bucket_cap_mb was left to
    its default (an explicit bucket_cap_mb closes the first bucket at the cap too)."""
    import torch.distributed as dist

    cap = int(ddp.bucket_bytes_cap)  # type: ignore[attr-defined]
    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        first = int(config.first_bucket_bytes_cap)
    else:  # torch releases without the bucket config object
        first = dist._DEFAULT_FIRST_BUCKET_BYTES if getattr(ddp, "bucket_bytes_cap_default", False) else cap
    return cap / 2**20, first / 2**20


def prepare_rank_environment(rank: int) -> None:
    """Before dlbench's instrumentation reads its settings: rank r > 0 profiles into its own folder and
    publishes nothing."""
    if rank == 0:
        return
    from dlbench.training.instrument import DEFAULT_DIR

    base = Path(os.environ.get(PROFILE_DIR) or DEFAULT_DIR)
    os.environ[PROFILE_DIR] = str(base / f"rank{rank}")
    for name in RANK_ZERO_ONLY:
        os.environ.pop(name, None)


def main() -> None:
    group = rank_and_world()
    if group is None:
        world_size = world_size_argument(sys.argv[1:])
        if world_size > 1:
            sys.exit(launch_ranks(world_size))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        group = (0, 1, 1)
    rank, world, local_world = group
    prepare_rank_environment(rank)

    import torch
    import torch.distributed as dist
    from common import base_parser, setup, train
    from mlp import make_mlp, synthetic_digits
    from torch.nn import functional as F
    from torch.nn.parallel import DistributedDataParallel

    parser = base_parser(__doc__.splitlines()[0], batch_size=32, lr=0.02)
    parser.add_argument("--hidden", type=int, default=2048, help="units per hidden layer")
    parser.add_argument("--layers", type=int, default=3, help="hidden layers")
    parser.add_argument("--world-size", type=int, default=1, help="ranks (torchrun --nproc-per-node)")
    parser.add_argument(
        "--bucket-cap-mb", type=float, default=25.0, help="DDP's gradient bucket size in MiB; 0: DDP's default"
    )
    args = parser.parse_args()
    if args.threads == 0:  # torch's default would give every rank all cores: share them
        args.threads = threads_per_rank(0, local_world)
    device = setup(args)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    args.world_size = world
    model = make_mlp(28 * 28, args.hidden, args.layers, 10).to(device).to(getattr(torch, args.dtype))
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb or None)
    # reported with the arguments: dlbench's prediction cuts these into DDP's buckets with DDP's limits
    args.parameter_bytes = ",".join(str(p.numel() * p.element_size()) for p in model.parameters())
    args.bucket_cap_mb, args.first_bucket_cap_mb = bucket_limits_mb(ddp)
    data = synthetic_digits(args.data_batches, args.batch_size, device, args.seed + rank)  # each rank its shard
    train(ddp, data, F.cross_entropy, args, f"mlp_ddp rank {rank}", network=model)
    dist.barrier()  # every rank's profile is written before rank 0's run ends
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
