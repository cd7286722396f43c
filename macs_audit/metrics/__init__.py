"""Metrics: mergeable accumulators, the metric registry, margins, sensitivity, corruption summaries."""
