"""prover-core: Propose, Verify, Credit for agentic RL.

The four stages live in their own modules: :mod:`prover_core.trigger`, :mod:`prover_core.propose`
(with :mod:`prover_core.judges`), :mod:`prover_core.verify` and :mod:`prover_core.credit`;
:func:`compute_bonus` runs them over a batch.
"""

from prover_core.bonus import BonusResult, acompute_bonus, compute_bonus, group_batch
from prover_core.config import ProverConfig
from prover_core.data import Decline, Outcome, Proposal, Segment, SegmentRules, Trajectory, Turn, Verification
from prover_core.engine import EnginePolicy, Generation, SamplingParams, TokenEngine, TokenStore
from prover_core.errors import (
    ContinuationError,
    ContinuationLimitError,
    ContinuationTimeoutError,
    EngineError,
    EngineHTTPError,
    EngineResponseError,
    EngineTimeoutError,
    HostImportError,
    InvalidBatchError,
    InvalidSegmentError,
    JudgeError,
    JudgeUnsupportedError,
    ProverError,
    ReplayMismatchError,
    RestoreError,
    RolloutLimitError,
    ThreadsExhaustedError,
    TokenRecordError,
    WorkerLostError,
)
from prover_core.executors import LocalExecutor, RayExecutor
from prover_core.grpo import group_advantages, grpo_advantages
from prover_core.judges import AnchorJudge, ChoiceJudge, DivergenceJudge, FirstOf, RandomJudge, default_judge
from prover_core.progress import Progress
from prover_core.protocols import (
    BatchPolicy,
    ContinueFn,
    Episode,
    FunctionPolicy,
    Judge,
    Policy,
    PolicyContext,
    RestorableEnv,
    Step,
)
from prover_core.report import GroupRecord, Report
from prover_core.restore import Env, LiveEpisode, ReplayEnv, SnapshotEnv
from prover_core.view import TrajectoryCredit, TurnCredit, credit_view, plot_credit, render_credit

__version__ = "0.1.0"

__all__ = [
    "BatchPolicy",
    "AnchorJudge",
    "BonusResult",
    "ContinuationError",
    "ContinuationLimitError",
    "ContinuationTimeoutError",
    "ContinueFn",
    "ChoiceJudge",
    "Decline",
    "DivergenceJudge",
    "FirstOf",
    "EngineError",
    "EngineHTTPError",
    "EnginePolicy",
    "EngineResponseError",
    "EngineTimeoutError",
    "Env",
    "Episode",
    "FunctionPolicy",
    "Generation",
    "GroupRecord",
    "HostImportError",
    "InvalidBatchError",
    "InvalidSegmentError",
    "Judge",
    "JudgeError",
    "JudgeUnsupportedError",
    "LiveEpisode",
    "LocalExecutor",
    "Outcome",
    "Policy",
    "PolicyContext",
    "Progress",
    "Proposal",
    "ProverConfig",
    "ProverError",
    "RandomJudge",
    "RayExecutor",
    "ReplayEnv",
    "ReplayMismatchError",
    "Report",
    "RestorableEnv",
    "RestoreError",
    "RolloutLimitError",
    "SamplingParams",
    "Segment",
    "SegmentRules",
    "SnapshotEnv",
    "Step",
    "TokenEngine",
    "ThreadsExhaustedError",
    "TokenRecordError",
    "TokenStore",
    "Trajectory",
    "TrajectoryCredit",
    "Turn",
    "TurnCredit",
    "Verification",
    "WorkerLostError",
    "acompute_bonus",
    "compute_bonus",
    "default_judge",
    "credit_view",
    "group_advantages",
    "group_batch",
    "grpo_advantages",
    "plot_credit",
    "render_credit",
]
