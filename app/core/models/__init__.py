"""Which models exist and what fits: the catalogs, the embedded model, hub downloads, model folders,
families, and the memory planner."""
