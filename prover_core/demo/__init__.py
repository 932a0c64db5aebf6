"""The embedded default: a small text environment with one pivotal decision, solvable exactly."""

from prover_core.demo.mdp import FiniteMDP, MDPEnv, TabularPolicy, exact_success_probability
from prover_core.demo.vault import VaultBatchPolicy, VaultMDP, vault_policy

__all__ = [
    "FiniteMDP",
    "MDPEnv",
    "TabularPolicy",
    "VaultBatchPolicy",
    "VaultMDP",
    "exact_success_probability",
    "vault_policy",
]
