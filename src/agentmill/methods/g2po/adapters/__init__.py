"""Framework adapters (optional extras, imported lazily): verl advantage-estimator registration."""
