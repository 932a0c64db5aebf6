"""The ``--train.agent_func_path`` file of the OpenRLHF engine tests: KeyDoor through the recording executor."""

from prover_openrlhf.recorder import RecordingAgentExecutor
from tests.adapters.openrlhf_stand_in import KeyDoor


class AgentExecutor(RecordingAgentExecutor):
    def __init__(self) -> None:
        super().__init__(KeyDoor)
