"""A model file -> operations: load, infer shapes, describe nodes, deduplicate, unfold into a training step."""
