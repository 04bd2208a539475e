"""One module per task; each exposes ``run(cfg: DlbenchConfig, ctx: AppContext) -> int``."""
