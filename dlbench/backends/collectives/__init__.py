"""torch.distributed collectives behind the CSV protocol: ``python -m dlbench.backends.collectives OP INPUT.csv``
starts ``world_size`` ranks on this machine (gloo on CPUs, NCCL with ``DLBENCH_DEVICE=cuda``) and times each
row's message among them."""
