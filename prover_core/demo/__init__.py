"""The embedded default: a small text environment with one pivotal decision, solvable exactly.

The finite MDPs and their exact solver live in the private ``_finite_mdp`` module; what the benchmarks and tests use
of it is exported here.
"""

from prover_core.demo._finite_mdp import FiniteMDP, MDPEnv, TabularPolicy, Transition, exact_success_probability
from prover_core.demo.vault import VaultBatchPolicy, VaultMDP, vault_policy

__all__ = [
    "FiniteMDP",
    "MDPEnv",
    "TabularPolicy",
    "Transition",
    "VaultBatchPolicy",
    "VaultMDP",
    "exact_success_probability",
    "vault_policy",
]
