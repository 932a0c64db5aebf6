"""Names the adapter registers under (no torch or verl import)."""

ESTIMATOR_NAME = "prover"
"""``algorithm.adv_estimator`` value that selects the ProVer estimator."""
