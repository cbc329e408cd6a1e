"""tdrl.utils (and its TorchRL path tdrl._utils): timeit, logger, get_available_device,
compile_with_warmup."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
import torch

import tdrl._utils
import tdrl.utils
from tdrl.utils import compile_with_warmup, get_available_device, logger, timeit


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    monkeypatch.setattr(timeit, "_REG", {})
    monkeypatch.setattr(timeit, "_MARKS", {})
    monkeypatch.setattr(timeit, "_printevery_count", 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(tdrl.utils, "_clock", fake)
    return fake


def test_torchrl_path_reexports_the_same_objects():
    for name in ("timeit", "logger", "get_available_device", "compile_with_warmup"):
        assert getattr(tdrl._utils, name) is getattr(tdrl.utils, name)


def test_context_manager_records_mean_total_and_count(clock):
    for dt in (0.25, 0.75):
        with timeit("collect"):
            clock.now += dt
    assert timeit.todict() == {"collect": pytest.approx(0.5)}
    assert timeit.todict(percall=False) == {"collect": pytest.approx(1.0)}
    assert timeit.count("collect") == 2


def test_todict_prefix_joins_with_a_slash(clock):
    with timeit("train"):
        clock.now += 1
    assert list(timeit.todict(prefix="time")) == ["time/train"]


def test_decorator_times_each_call_and_keeps_the_function(clock):
    @timeit("double")
    def double(x):
        """Doubles x."""
        clock.now += 0.5
        return 2 * x

    assert double(3) == 6 and double(4) == 8
    assert double.__name__ == "double" and double.__doc__ == "Doubles x."
    assert timeit.count("double") == 2
    assert timeit.todict(percall=False)["double"] == pytest.approx(1.0)


def test_decorator_is_reentrant(clock):
    """A recursive call keeps its own start time (TorchRL's shared t0 would be overwritten)."""

    @timeit("rec")
    def rec(n):
        clock.now += 1
        return rec(n - 1) if n else 0

    rec(2)  # durations: 3 (outer), 2, 1
    assert timeit.todict(percall=False)["rec"] == pytest.approx(6.0)


def test_exception_inside_still_records(clock):
    with pytest.raises(ZeroDivisionError), timeit("boom"):
        clock.now += 2
        _ = 1 / 0
    assert timeit.todict()["boom"] == pytest.approx(2.0)


def test_start_and_elapsed(clock):
    timer = timeit("long").start()
    clock.now += 3
    assert timer.elapsed() == pytest.approx(3.0)
    assert timeit.count("long") == 0  # a stopwatch records nothing by itself


def test_mark_start_and_end(clock):
    timeit.mark_start("phase")
    clock.now += 1.5
    timeit.mark_end("phase")
    assert timeit.todict()["phase"] == pytest.approx(1.5)
    with pytest.raises(KeyError, match="mark_start"):
        timeit.mark_end("phase")


def test_print_format_and_sorting(clock, caplog):
    for name, dt in (("b", 0.002), ("a", 0.5)):
        with timeit(name):
            clock.now += dt
    with caplog.at_level(logging.INFO, logger="tdrl"):
        text = timeit.print(prefix="it 3")
    expected = [
        "it 3 -- a took 500.0000 msec (total =  0.5000 sec since last reset).",
        "it 3 -- b took 2.0000 msec (total =  0.0020 sec since last reset).",
    ]
    assert text.splitlines() == expected
    assert [r.getMessage() for r in caplog.records if r.name == "tdrl"] == expected


def test_erase_zeroes_but_keeps_names(clock):
    with timeit("x"):
        clock.now += 1
    timeit.erase()
    assert timeit.todict() == {"x": 0.0} and timeit.count("x") == 0
    with timeit("x"):
        clock.now += 2
    assert timeit.todict() == {"x": pytest.approx(2.0)}
    timeit.reset()
    assert timeit.todict() == {"x": 0.0}


def test_printevery_prints_every_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(timeit, "print", staticmethod(lambda prefix=None: calls.append(prefix)))
    for _ in range(10):
        timeit.printevery(num_prints=5, total_count=10, prefix="p")
    assert calls == ["p"] * 5


def test_timeit_overhead_is_small():
    """Not a benchmark: a loose bound that catches an accidental slow path (a lock, a sync)."""
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        with timeit("hot"):
            pass
    per_use = (time.perf_counter() - t0) / n
    assert timeit.count("hot") == n
    assert per_use < 50e-6


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )


def test_logger_prints_info_to_stdout_when_logging_is_not_configured():
    out = _run(
        "from tdrl.utils import logger\n"
        "assert logger.handlers == [] and logger.name == 'tdrl'\n"
        "logger.info('hello %s', 42)\n"
        "logger.debug('hidden')\n"
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and lines[0].endswith("[tdrl][INFO] hello 42")
    assert out.stderr == ""


def test_logger_defers_to_the_application_configuration():
    out = _run(
        "import logging, sys\n"
        "from tdrl.utils import logger\n"
        "logging.basicConfig(stream=sys.stderr, format='APP %(name)s %(message)s')\n"
        "logger.info('once')\n"
    )
    assert out.stdout == ""
    assert out.stderr.splitlines() == ["APP tdrl once"]


def test_logger_is_a_logging_logger_at_info():
    assert isinstance(logger, logging.Logger)
    assert logger is logging.getLogger("tdrl")
    assert logger.getEffectiveLevel() == logging.INFO


def test_get_available_device_cpu_and_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch, "npu"):
        monkeypatch.setattr(torch.npu, "is_available", lambda: False, raising=False)
    assert get_available_device() == torch.device("cpu")
    assert get_available_device(return_str=True) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_available_device() == torch.device("cuda", 0)
    assert get_available_device(return_str=True) == "cuda:0"


def test_get_available_device_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    if hasattr(torch, "npu"):
        monkeypatch.setattr(torch.npu, "is_available", lambda: False, raising=False)
    assert get_available_device(return_str=True) == "mps:0"


class FakeCompile:
    def __init__(self) -> None:
        self.calls: list[tuple[object, dict]] = []

    def __call__(self, model, **kwargs):
        self.calls.append((model, kwargs))
        return lambda *a, **k: ("compiled", model(*a, **k))


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_compile_with_warmup_runs_eagerly_then_compiles_once(monkeypatch, warmup):
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)

    def model(x):
        return x + 1

    fast = compile_with_warmup(model, warmup=warmup, mode="reduce-overhead")
    outs = [fast(i) for i in range(warmup + 2)]
    assert outs[:warmup] == list(range(1, warmup + 1))
    assert outs[warmup:] == [("compiled", warmup + 1), ("compiled", warmup + 2)]
    assert fake.calls == [(model, {"mode": "reduce-overhead"})]


def test_compile_with_warmup_as_decorator(monkeypatch):
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)

    @compile_with_warmup(warmup=1, backend="eager")
    def f(x):
        return x * 2

    assert f(2) == 4 and f(3) == ("compiled", 6)
    assert fake.calls[0][1] == {"backend": "eager"}


def test_compile_with_warmup_really_compiles_a_module():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    fast = compile_with_warmup(lin, warmup=1, backend="eager")
    x = torch.randn(4, 3)
    torch.testing.assert_close(fast(x), lin(x))
    torch.testing.assert_close(fast(x), lin(x))
    assert fast.compiled is not None


def test_compile_with_warmup_rejects_negative_warmup():
    with pytest.raises(ValueError, match="warmup must be a non-negative int"):
        compile_with_warmup(torch.nn.Linear(1, 1), warmup=-1)
