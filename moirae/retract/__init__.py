"""Retractions, corrections and forward lookup over provenance polynomials (H 3-4, A 3)."""
