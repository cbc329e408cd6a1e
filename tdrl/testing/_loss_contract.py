"""A contract every tdrl loss passes: keys, no input mutation, gradients where intended.

Subclass ``LossContract`` in a pytest test class and write the four hooks::

    class TestMyLoss(LossContract):
        loss_terms = {"loss_objective", "loss_critic"}
        def make_loss(self, nested): ...      # the loss, with networks reading nested keys if asked
        def make_batch(self, nested): ...     # a batch the loss accepts
        def nested_keys(self): ...            # the set_keys(...) arguments for the nested layout
        def trained_params(self, loss): ...   # names (from loss.named_parameters()) that get grads
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase

from tdrl.objectives import LossModule

__all__ = ["LossContract"]


def _is_loss_term(key: object) -> bool:
    # TorchRL's convention: "loss" (DQN) or "loss_<name>" terms are summed to backpropagate.
    return isinstance(key, str) and (key == "loss" or key.startswith("loss_"))


def _loss_sum(out: TensorDictBase) -> torch.Tensor:
    terms = [v for k, v in out.items() if _is_loss_term(k)]
    return torch.stack([t.sum() for t in terms]).sum()


class LossContract:
    """Shared tests for losses; see the module docstring for the hooks to write."""

    loss_terms: set[str] = set()

    def make_loss(self, nested: bool) -> LossModule:
        raise NotImplementedError

    def make_batch(self, nested: bool) -> TensorDictBase:
        raise NotImplementedError

    def nested_keys(self) -> dict[str, Any]:
        raise NotImplementedError

    def trained_params(self, loss: LossModule) -> set[str]:
        raise NotImplementedError

    def _run(self, nested: bool) -> tuple[LossModule, TensorDictBase, TensorDictBase]:
        torch.manual_seed(0)
        loss = self.make_loss(nested)
        if nested:
            loss.set_keys(**self.nested_keys())
        batch = self.make_batch(nested)
        return loss, batch, loss(batch)

    @pytest.mark.parametrize("nested", [False, True])
    def test_contract_loss_terms(self, nested: bool) -> None:
        _, _, out = self._run(nested)
        missing = self.loss_terms - set(out.keys())
        assert not missing, f"missing loss terms {missing}; got {sorted(out.keys())}"
        for key, value in out.items():
            if _is_loss_term(key):
                assert value.numel() == 1 and torch.isfinite(value).all(), key
            elif isinstance(value, torch.Tensor):
                assert not value.requires_grad, f"diagnostic {key} is not detached"

    def test_contract_unknown_key_raises(self) -> None:
        loss = self.make_loss(False)
        with pytest.raises(KeyError, match="unknown key name"):
            loss.set_keys(not_a_key_name="x")

    @pytest.mark.parametrize("nested", [False, True])
    def test_contract_input_gets_only_the_priority(self, nested: bool) -> None:
        # As TorchRL's: the only entry a loss writes into its input is its TD error (priority).
        torch.manual_seed(0)
        loss = self.make_loss(nested)
        if nested:
            loss.set_keys(**self.nested_keys())
        batch = self.make_batch(nested)
        before = batch.clone()
        out = loss(batch)
        priority = getattr(loss.tensor_keys, "priority", None)
        written = set(batch.keys(True, True)) - set(before.keys(True, True))
        assert written == ({priority} if priority is not None else set()), written
        if priority is not None:
            # One TD error per sample (TorchRL's shape: DQN's keeps the value's trailing dim);
            # the output keeps it only where TorchRL's does (DDPG; discrete CQL: its mean).
            error = batch.get(priority)
            assert error.shape[: batch.batch_dims] == batch.batch_size
            shown = loss._priority_output(error)
            if shown is None:
                assert priority not in out.keys(True), f"the output holds {priority!r}"
            else:
                assert torch.equal(out.get(priority), shown)
        for key in before.keys(True, True):
            assert torch.equal(batch.get(key), before.get(key)), f"input entry {key} changed"

    def test_contract_gradients_reach_exactly_the_trained_params(self) -> None:
        loss, _, out = self._run(False)
        _loss_sum(out).backward()
        expected = self.trained_params(loss)
        names = {n for n, _ in loss.named_parameters()}
        assert expected <= names, f"unknown parameter names {expected - names}"
        for name, p in loss.named_parameters():
            got = p.grad is not None and bool(p.grad.abs().sum() > 0)
            if name in expected:
                assert got, f"parameter {name} got no gradient"
            else:
                assert not got, f"parameter {name} got a gradient it should not"

    def test_contract_targets_untouched_by_backward(self) -> None:
        loss, _, out = self._run(False)
        before = [t.clone() for _, t in loss.target_pairs()]
        _loss_sum(out).backward()
        for (_, target), old in zip(loss.target_pairs(), before):
            for key in old.keys(True, True):
                value = target.get(key)
                assert torch.equal(value, old.get(key))
                assert value.grad is None and not value.requires_grad

    def test_contract_compiles_without_graph_breaks(self) -> None:
        # loss.compile(fullgraph=True) traces the whole forward (tdrl's key routing, targets,
        # estimator) and gives the eager outputs and TD-error write ("eager" backend: no codegen).
        torch.manual_seed(0)
        loss = self.make_loss(False)
        batch = self.make_batch(False)
        compiled = copy.deepcopy(loss)
        compiled.compile(backend="eager", fullgraph=True)
        eager_batch, compiled_batch = batch.clone(), batch.clone()
        torch.manual_seed(1)
        expected = loss(eager_batch)
        torch.manual_seed(1)
        got = compiled(compiled_batch)
        assert set(got.keys(True, True)) == set(expected.keys(True, True))
        for key in expected.keys(True, True):
            torch.testing.assert_close(got.get(key), expected.get(key), msg=str(key))
        for key in eager_batch.keys(True, True):
            torch.testing.assert_close(compiled_batch.get(key), eager_batch.get(key))
