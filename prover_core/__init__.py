"""prover-core: Propose, Verify, Credit for agentic RL.

The four stages live in their own modules: :mod:`prover_core.trigger`, :mod:`prover_core.propose`
(with :mod:`prover_core.judges`), :mod:`prover_core.verify` and :mod:`prover_core.credit`;
:func:`compute_bonus` runs them over a batch.
"""

from prover_core.bonus import BonusResult, acompute_bonus, compute_bonus, group_batch
from prover_core.budget import TokenPolicy
from prover_core.chance import LiftWindow
from prover_core.config import ProverConfig
from prover_core.data import Decline, Outcome, Proposal, Segment, SegmentRules, Trajectory, Turn, Verification
from prover_core.errors import (
    AnswerTimeout,
    AnswerTooLargeError,
    BudgetExhaustedError,
    ContinuationError,
    ContinuationLimitError,
    ContinuationTimeoutError,
    CredentialError,
    EngineError,
    EventLoopError,
    HostImportError,
    InvalidBatchError,
    InvalidOutcomeError,
    InvalidSegmentError,
    JudgeAnswerTooLargeError,
    JudgeError,
    JudgeRefusedError,
    JudgeTimeoutError,
    JudgeUnsupportedError,
    MissingReseedError,
    ProtocolError,
    ProverError,
    ReplayMismatchError,
    ResourceError,
    RestoreError,
    RolloutLimitError,
    ThreadsExhaustedError,
    UsageError,
    WorkerLostError,
)
from prover_core.executors import LocalExecutor, RayExecutor
from prover_core.grpo import group_advantages, grpo_advantages
from prover_core.isolate import IsolatedEnv
from prover_core.judges import AnchorJudge, ChoiceJudge, DivergenceJudge, FirstOf, RandomJudge, default_judge
from prover_core.progress import Progress
from prover_core.protocols import (
    BatchPolicy,
    ContinueFn,
    Episode,
    FunctionPolicy,
    Judge,
    OthersJudge,
    PerStepJudge,
    Policy,
    PolicyContext,
    ReportingJudge,
    RestorableEnv,
    Step,
)
from prover_core.report import GroupRecord, Report
from prover_core.restore import Env, LiveEpisode, ReplayEnv, SnapshotEnv
from prover_core.run import ProverRun, merge_reports
from prover_core.view import TrajectoryCredit, TurnCredit, credit_view, plot_credit, render_credit

__version__ = "0.1.0"

__all__ = [
    "BatchPolicy",
    "AnchorJudge",
    "AnswerTimeout",
    "AnswerTooLargeError",
    "BonusResult",
    "ChoiceJudge",
    "ContinuationError",
    "BudgetExhaustedError",
    "ContinuationLimitError",
    "ContinuationTimeoutError",
    "ContinueFn",
    "CredentialError",
    "Decline",
    "DivergenceJudge",
    "EngineError",
    "Env",
    "Episode",
    "EventLoopError",
    "FirstOf",
    "FunctionPolicy",
    "GroupRecord",
    "HostImportError",
    "InvalidBatchError",
    "InvalidOutcomeError",
    "InvalidSegmentError",
    "IsolatedEnv",
    "Judge",
    "JudgeAnswerTooLargeError",
    "JudgeError",
    "JudgeRefusedError",
    "JudgeTimeoutError",
    "JudgeUnsupportedError",
    "LiftWindow",
    "LiveEpisode",
    "LocalExecutor",
    "MissingReseedError",
    "OthersJudge",
    "Outcome",
    "PerStepJudge",
    "Policy",
    "PolicyContext",
    "Progress",
    "Proposal",
    "ProtocolError",
    "ProverConfig",
    "ProverError",
    "ProverRun",
    "RandomJudge",
    "RayExecutor",
    "ReplayEnv",
    "ReplayMismatchError",
    "Report",
    "ReportingJudge",
    "ResourceError",
    "RestorableEnv",
    "RestoreError",
    "RolloutLimitError",
    "Segment",
    "SegmentRules",
    "SnapshotEnv",
    "Step",
    "ThreadsExhaustedError",
    "TokenPolicy",
    "Trajectory",
    "TrajectoryCredit",
    "Turn",
    "TurnCredit",
    "UsageError",
    "Verification",
    "WorkerLostError",
    "acompute_bonus",
    "compute_bonus",
    "credit_view",
    "default_judge",
    "group_advantages",
    "group_batch",
    "grpo_advantages",
    "merge_reports",
    "plot_credit",
    "render_credit",
]
