"""One meaning of "a token id" everywhere (genlab/ids.py): an integer, never a bool."""

from __future__ import annotations

import pytest
import torch

from genlab.ids import is_id_list, is_token_id
from genlab.stopping import EosTokenCriteria
from genlab.strategies.constraints import PhrasalConstraint


def test_a_bool_is_refused_as_a_token_id_by_stopping_and_by_constraints_alike():
    with pytest.raises(ValueError, match="eos_token_id"):
        EosTokenCriteria(True)
    with pytest.raises(ValueError, match="eos_token_id"):
        EosTokenCriteria([2, False])
    with pytest.raises(ValueError, match="token_ids"):
        PhrasalConstraint([5, True])
    assert EosTokenCriteria(2).eos_token_id.tolist() == [2]
    assert PhrasalConstraint([5, 6]).token_ids == [5, 6]


def test_an_id_list_is_a_row_of_non_negative_integer_ids():
    assert is_id_list([5, 6]) and is_id_list((5,)) and is_id_list(torch.tensor([1, 2]))
    assert not is_id_list([]) and is_id_list([], allow_empty=True)
    assert not is_id_list([5, -1]) and not is_id_list(torch.tensor([0.5]))
    assert not is_id_list([[5]]) and not is_id_list("56")
    assert is_token_id(torch.tensor(3)) and not is_token_id(torch.tensor(True))
