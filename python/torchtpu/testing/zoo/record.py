"""The result record of one model: what :func:`~torchtpu.testing.zoo.run.run_model` finds, what the
worker subprocess saves as JSON, and what the report reads."""

import dataclasses
from dataclasses import dataclass
from typing import Optional


@dataclass
class ModelResult:
    """One model's run on CPU and tpu. A field stays None where the run never got that far (a
    build error has no losses) or where it does not apply (``generate_parity`` of a model that
    does not generate, the Dynamo counts outside ``compiled``)."""

    model: str
    family: str
    steps: int
    # pass, fallback, drift, mismatch or error; the sweep adds timeout and crash
    status: Optional[str] = None
    error: Optional[str] = None
    # where the run is: saved as it goes, so a crash or a timeout is charged to its phase
    phase: str = "build"
    mode: Optional[str] = None  # the eager mode tpu ran in
    compiled: bool = False      # tpu ran through torch.compile(model, backend="tpu")
    params: Optional[int] = None
    traceback: Optional[str] = None

    # the CPU reference
    cpu_s: Optional[float] = None
    loss_cpu: Optional[list] = None

    # the tpu run
    tpu_s: Optional[float] = None
    tpu_train_s: Optional[float] = None
    tpu_generate_s: Optional[float] = None
    fallbacks: Optional[dict] = None  # op -> count (torchtpu.metrics.cpu_fallbacks())
    compiles: Optional[int] = None
    executions: Optional[int] = None
    graphs: Optional[int] = None      # compiled: Dynamo's graphs and graph breaks
    graph_breaks: Optional[int] = None
    graph_break_reasons: Optional[dict] = None
    loss_tpu: Optional[list] = None

    # tpu against CPU
    loss_rel_diff: Optional[float] = None
    loss_noise_runs: Optional[dict] = None  # the noise runs' losses (or their errors), by label
    fp32_noise_rel: Optional[float] = None
    loss_parity_within_noise: Optional[bool] = None
    loss_parity: Optional[bool] = None
    generated_cpu: Optional[list] = None
    generated_tpu: Optional[list] = None
    generate_parity: Optional[bool] = None
    param_rel_diff: Optional[float] = None
    param_worst: Optional[str] = None
    trace: Optional[dict] = None  # where the runs part (zoo.trace)
    total_s: Optional[float] = None

    # the sweep's subprocess
    wall_s: Optional[float] = None
    stderr_tail: Optional[str] = None

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        return cls(**data)
