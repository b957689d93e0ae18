"""Type stubs of the Rust extension (see kvreuse/__init__.py)."""

from os import PathLike
from types import TracebackType
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Type, Union

BUNDLED_TRACE_NAME: str

_Path = Union[str, "PathLike[str]"]
_Traces = Union[_Path, Sequence[_Path], None]
_List = Union[str, int, Sequence[Union[str, int]]]

def block_hashes(
    tokens: Sequence[int],
    block_size: int,
    *,
    scheme: str = "dynamo",
    lora_name: Optional[str] = None,
    cache_namespace: Optional[str] = None,
    eagle: bool = False,
    hash_seed: Optional[str] = None,
    cache_salt: Optional[str] = None,
) -> List[int]:
    """The block ids of `tokens` (complete blocks only) under `scheme`."""

class History:
    """A router's bounded FIFO history of block ids."""

    def __init__(self, capacity: Union[int, str]) -> None: ...
    def seen_prefix_len(self, ids: Sequence[int]) -> int: ...
    def insert_all(self, ids: Sequence[int]) -> int: ...
    def __contains__(self, id: int) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def heap_bytes(self) -> int: ...

def replay(
    traces: _Traces = None,
    *,
    capacities: Optional[_List] = None,
    policies: Optional[Union[str, Sequence[str]]] = None,
    block_size: Optional[int] = None,
    warmup: Optional[float] = None,
    warmup_requests: Optional[int] = None,
    skip_invalid: bool = False,
    format: Optional[str] = None,
    stagger: Optional[float] = None,
) -> List[Dict[str, Any]]:
    """The rows of `kvreuse replay --json`."""

def fleet(
    traces: _Traces = None,
    *,
    workers: Optional[_List] = None,
    worker_capacities: Optional[_List] = None,
    routers: Optional[Union[str, Sequence[str]]] = None,
    block_size: Optional[int] = None,
    engine_block_size: Optional[int] = None,
    kv_bytes_per_token: Optional[int] = None,
    history: Optional[Union[str, int]] = None,
    timing: Optional[Literal["mocker", "instant"]] = None,
    speedup: Optional[float] = None,
    warmup: Optional[float] = None,
    warmup_requests: Optional[int] = None,
    seed: Optional[int] = None,
    format: Optional[str] = None,
    stagger: Optional[float] = None,
    skip_invalid: bool = False,
) -> List[Dict[str, Any]]:
    """The rows of `kvreuse fleet --json`."""

def parse_worker_report(
    payload: Union[str, bytes], kind: Literal["dynamo", "openai", "sglang"] = "dynamo"
) -> Optional[Dict[str, int]]:
    """A worker's cache report, or None when the payload carries none."""

class Guard:
    """One routed request, counted exactly once."""

    @property
    def seen_tokens(self) -> int: ...
    def observe_output(self, choice_index: int, tokens: Sequence[int]) -> None: ...
    def observe_route(self, best_cached_tokens: int, selected_cached_tokens: int) -> None: ...
    def observe_worker(
        self,
        prompt_tokens: int,
        gpu_hit_tokens: int,
        cpu_hit_tokens: int = 0,
        cpu_lookup_tokens: int = 0,
    ) -> None: ...
    def complete(self) -> None: ...
    def incomplete(self) -> None: ...
    def __enter__(self) -> "Guard": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        traceback: Optional[TracebackType] = None,
    ) -> bool: ...

class Tracker:
    """A router's prefix-reuse accounting and its Prometheus metrics."""

    def __init__(
        self,
        block_size: int,
        *,
        history_bytes: int = 268435456,
        eagle: bool = False,
        metric_prefix: str = "dynamo_component_",
        const_labels: Optional[Mapping[str, str]] = None,
    ) -> None: ...
    def begin(self, tokens: Sequence[int]) -> Guard: ...
    def metrics_text(self) -> str: ...
    def metric_families(
        self,
    ) -> List[Tuple[str, str, str, List[Tuple[List[Tuple[str, str]], float]]]]: ...
