"""The LMDB store: one environment, a fixed handful of named sub-databases."""
