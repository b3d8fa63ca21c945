"""genlab.strategies.constraints against transformers 4.56.2's beam_constraints, step by step."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.generation import beam_constraints as ref

from genlab.strategies import constraints as gl

VOCAB = 6  # small, so random streams hit the constraints often


# ---------------------------------------------------------------- observing both sides


def _call(fn, *args):
    """The result of ``fn(*args)``, or the exception type it raised (compared too)."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the reference raises several types
        return ("raised", type(exc).__name__)


def describe(c) -> tuple | None:
    """Everything observable about one constraint (class, tokens, state, every method)."""
    if c is None:
        return None
    if type(c).__name__ == "PhrasalConstraint":
        state = (c.fulfilled_idx, c.completed)
    else:
        state = (list(c.current_seq), c.completed)
    probes = tuple(_call(c.does_advance, t) for t in range(VOCAB))
    return (
        type(c).__name__,
        c.token_ids,
        c.seqlen,
        state,
        _call(c.advance),
        _call(c.remaining),
        probes,
    )


def describe_state(s) -> tuple:
    return (
        s.completed,
        s.max_seqlen,
        s.n_constraints,
        s.advance(),
        s.get_bank(),
        [describe(c) for c in s.complete_constraints],
        describe(s.inprogress_constraint),
        [describe(c) for c in s.pending_constraints],
    )


def random_tokens(rng: random.Random, low: int = 1, high: int = 3) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(rng.randint(low, high))]


def random_options(rng: random.Random) -> list[list[int]]:
    """Disjunctive options where none is a prefix of another (retry until so)."""
    while True:
        options = [random_tokens(rng) for _ in range(rng.randint(1, 3))]
        if not any(
            i != j and b[: len(a)] == a
            for i, a in enumerate(options)
            for j, b in enumerate(options)
            if len(a) <= len(b)
        ):
            return options


def make_pair(rng: random.Random):
    """The same random constraint built by genlab and by the reference."""
    if rng.random() < 0.5:
        ids = random_tokens(rng)
        return gl.PhrasalConstraint(list(ids)), ref.PhrasalConstraint(list(ids))
    options = random_options(rng)
    return (
        gl.DisjunctiveConstraint([list(o) for o in options]),
        ref.DisjunctiveConstraint([list(o) for o in options]),
    )


def pick_token(rng: random.Random, proposal) -> int:
    """Half the time a token the constraint asks for, otherwise any token."""
    if proposal is not None and rng.random() < 0.6:
        return rng.choice(proposal) if isinstance(proposal, list) else proposal
    return rng.randrange(VOCAB)


# ---------------------------------------------------------------- single constraints


@pytest.mark.parametrize("seed", range(150))
def test_single_constraint_matches_reference_on_random_stream(seed):
    rng = random.Random(seed)
    mine, theirs = make_pair(rng)
    assert describe(mine) == describe(theirs)
    for _ in range(25):
        proposal = _call(theirs.advance)
        token = pick_token(rng, proposal[1] if proposal[0] == "ok" else None)
        assert _call(mine.update, token) == _call(theirs.update, token)
        assert describe(mine) == describe(theirs)
        roll = rng.random()
        if roll < 0.1:
            mine.reset(), theirs.reset()
        elif roll < 0.3:
            # a stateful copy, stepped once: the original must change (or not) the same way
            stateful = rng.random() < 0.7
            my_copy, their_copy = mine.copy(stateful=stateful), theirs.copy(stateful=stateful)
            assert describe(my_copy) == describe(their_copy)
            token = rng.randrange(VOCAB)
            assert _call(my_copy.update, token) == _call(their_copy.update, token)
            assert describe(my_copy) == describe(their_copy)
            assert describe(mine) == describe(theirs)
            if rng.random() < 0.5:
                mine, theirs = my_copy, their_copy
        assert describe(mine) == describe(theirs)


def test_phrasal_walkthrough_and_reset_quirk():
    c = gl.PhrasalConstraint([7, 8, 9])
    assert (c.advance(), c.remaining()) == (7, 3)
    assert c.update(7) == (True, False, False)
    assert c.update(8) == (True, False, False)
    assert c.update(1) == (False, False, True)
    # reference quirk: after a reset the phrase thinks its first token is matched
    assert (c.fulfilled_idx, c.advance(), c.remaining()) == (0, 8, 2)
    assert c.update(8) == (True, False, False)
    assert c.update(9) == (True, True, False)
    assert (c.completed, c.advance(), c.remaining(), c.does_advance(9)) == (True, None, 0, False)


def test_one_token_phrase_reset_after_completion_raises_index_error_like_reference():
    for cls in (gl.PhrasalConstraint, ref.PhrasalConstraint):
        c = cls([4])
        assert c.update(4) == (True, True, False)
        assert c.update(5) == (False, False, True)
        with pytest.raises(IndexError):
            c.advance()


def test_disjunctive_walkthrough_and_shorter_option_remaining():
    c = gl.DisjunctiveConstraint([[1, 2, 3], [4]])
    assert (c.advance(), c.remaining(), c.seqlen) == ([1, 4], 3, 3)
    assert c.update(4) == (True, True, False)
    assert (c.completed, c.remaining(), c.advance()) == (True, 0, None)
    c.reset()
    assert c.update(1) == (True, False, False)
    assert c.update(9) == (False, False, True)
    assert (c.current_seq, c.advance()) == ([], [1, 4])


def test_disjunctive_stateful_copy_shares_progress_like_reference():
    for cls in (gl.DisjunctiveConstraint, ref.DisjunctiveConstraint):
        original = cls([[5, 6], [5, 7]])
        original.update(5)
        clone = original.copy(stateful=True)
        clone.update(6)
        assert original.current_seq == [5, 6]  # shared list: the original moved too
        fresh = original.copy()
        assert fresh.current_seq == [] and fresh.current_seq is not original.current_seq


def test_trie_next_tokens_and_leaves():
    trie = gl.DisjunctiveTrie([[1, 2], [1, 3], [4]])
    assert trie.trie == {1: {2: {}, 3: {}}, 4: {}}
    assert trie.trie == ref.DisjunctiveTrie([[1, 2], [1, 3], [4]]).trie
    assert (trie.next_tokens([]), trie.next_tokens([1]), trie.max_height) == ([1, 4], [2, 3], 2)
    assert trie.reached_leaf([1, 3]) and not trie.reached_leaf([1])
    assert trie.count_leaves(trie.trie) == 3
    with pytest.raises(KeyError):
        trie.next_tokens([9])
    assert gl.DisjunctiveTrie([[1], [1, 2]], no_subsets=False).trie == {1: {2: {}}}


def test_builtin_constraints_pass_their_self_test_and_end_in_same_state():
    for ids in ([3], [3, 4, 5]):
        mine, theirs = gl.PhrasalConstraint(ids), ref.PhrasalConstraint(ids)
        mine.test(), theirs.test()
        assert describe(mine) == describe(theirs)
    # a disjunctive constraint proposes a list, which its own does_advance rejects: the
    # reference's self-test cannot run on it, and neither can genlab's
    for cls in (gl.DisjunctiveConstraint, ref.DisjunctiveConstraint):
        with pytest.raises(TypeError):
            cls([[1, 2], [3]]).test()


class _NeverAdvances(gl.Constraint):
    """A broken custom constraint: its proposal does not count as progress."""

    seqlen = 1

    def advance(self):
        return 1

    def does_advance(self, token_id):
        return False

    def update(self, token_id):
        return False, False, True

    def reset(self):
        pass

    def remaining(self):
        return 1

    def copy(self, stateful=False):
        return _NeverAdvances()


class _Countdown(gl.Constraint):
    """A correct custom constraint: any token counts, done after two."""

    seqlen = 2

    def __init__(self):
        self.left = 2
        super().__init__()  # runs test(), which leaves it completed

    def advance(self):
        return [0, 1] if self.left else None

    def does_advance(self, token_id):
        return self.left > 0

    def update(self, token_id):
        if self.left == 0:
            return False, True, False
        self.left -= 1
        return True, self.left == 0, False

    def reset(self):
        self.left = 2

    def remaining(self):
        return self.left

    def copy(self, stateful=False):
        other = _Countdown()
        other.left = self.left if stateful else 2
        return other


def test_custom_constraint_is_checked_by_base_init():
    with pytest.raises(ValueError, match="does_advance"):
        _NeverAdvances()
    c = _Countdown()
    assert c.remaining() == 0
    state = gl.ConstraintListState([c])
    assert (state.advance(), state.add(3), state.add(4), state.completed) == (
        [0, 1],
        (False, True),
        (True, True),
        True,
    )


class _Logged:
    """A custom constraint body that logs every call; ``need`` tokens complete it and
    ``left_over`` is what remaining() reports once complete (0 for a correct one)."""

    seqlen = 3

    def __init__(self, need=3, left_over=0):
        self.need, self.left_over, self.done, self.log = need, left_over, 0, []
        super().__init__()

    def advance(self):
        self.log.append("advance")
        return 2

    def does_advance(self, token_id):
        self.log.append(("does_advance", token_id))
        return True

    def update(self, token_id):
        self.log.append(("update", token_id))
        self.done += 1
        return True, self.done >= self.need, False

    def reset(self):
        self.log.append("reset")
        self.done = 0

    def remaining(self):
        self.log.append("remaining")
        return self.left_over if self.done >= self.need else self.need - self.done

    def copy(self, stateful=False):
        return self


class _LoggedMine(_Logged, gl.Constraint):
    pass


class _LoggedTheirs(_Logged, ref.Constraint):
    pass


@pytest.mark.parametrize("need", [1, 2, 4, 20_000])
def test_self_test_makes_the_same_calls_as_reference(need):
    def run(cls):
        try:
            return cls(need=need).log
        except Exception:  # noqa: BLE001 - the reference raises bare Exception
            return "raised"

    assert run(_LoggedMine) == run(_LoggedTheirs)
    if need == 20_000:
        with pytest.raises(ValueError, match="did not complete it within 10000 steps"):
            _LoggedMine(need=need)


def test_self_test_rejects_nonzero_remaining_after_completion():
    with pytest.raises(Exception, match="not defined correctly"):
        _LoggedTheirs(need=1, left_over=1)
    with pytest.raises(ValueError, match="remaining\\(\\) is 1 after completion"):
        _LoggedMine(need=1, left_over=1)


def test_abstract_constraint_cannot_be_built():
    with pytest.raises(TypeError):
        gl.Constraint()


# ---------------------------------------------------------------- constructor errors


@pytest.mark.parametrize("token_ids", [[], None, (1, 2), [1, -1], [1, 2.0], [[1, 2]], ["a"], "12"])
def test_phrasal_rejects_bad_token_ids_like_reference(token_ids):
    with pytest.raises(ValueError):
        ref.PhrasalConstraint(token_ids)
    with pytest.raises(ValueError, match="`token_ids`") as info:
        gl.PhrasalConstraint(token_ids)
    assert repr(token_ids) in str(info.value)


@pytest.mark.parametrize(
    "nested, fragment",
    [
        ([], "non-empty"),
        (None, "non-empty"),
        ([1, 2], "list of lists"),
        ([[1], (2,)], "list of lists"),
        ([[1], [-2]], "non-negative"),
        ([[1], [2.0]], "non-negative"),
        ([[1], [1, 2]], "option 0 [1] is a prefix of option 1 [1, 2]"),
        ([[1, 2], [3], [1, 2]], "option 0 [1, 2] is equal to option 2 [1, 2]"),
        ([[1], []], "option 1 is empty"),
    ],
)
def test_disjunctive_rejects_bad_options_like_reference(nested, fragment):
    with pytest.raises(ValueError):
        ref.DisjunctiveConstraint(nested)
    with pytest.raises(ValueError, match="`nested_token_ids`") as info:
        gl.DisjunctiveConstraint(nested)
    assert fragment in str(info.value)


def test_disjunctive_rejects_lone_empty_option_which_reference_accepts():
    ref.DisjunctiveConstraint([[]])  # accepted there, and complete after any token
    with pytest.raises(ValueError, match="option 0 is empty"):
        gl.DisjunctiveConstraint([[]])


def test_non_int_tokens_raise_type_error_like_reference():
    for mine, theirs in [
        (gl.PhrasalConstraint([1]), ref.PhrasalConstraint([1])),
        (gl.DisjunctiveConstraint([[1]]), ref.DisjunctiveConstraint([[1]])),
    ]:
        for method in ("does_advance", "update"):
            with pytest.raises(TypeError):
                getattr(theirs, method)(torch.tensor(1))
            with pytest.raises(TypeError, match="`token_id`.*tolist"):
                getattr(mine, method)(torch.tensor(1))
    with pytest.raises(TypeError, match="`token_id`"):
        gl.ConstraintListState([gl.PhrasalConstraint([1])]).add(1.0)


def test_state_rejects_empty_constraint_list():
    with pytest.raises(ValueError, match="`constraints` must be a non-empty list"):
        gl.ConstraintListState([])
    with pytest.raises(ValueError, match="seqlen"):
        gl.ConstraintListState([object()])


# ---------------------------------------------------------------- ConstraintListState


def make_state_pair(rng: random.Random):
    pairs = [make_pair(rng) for _ in range(rng.randint(1, 3))]
    return (
        gl.ConstraintListState([m for m, _ in pairs]),
        ref.ConstraintListState([t for _, t in pairs]),
    )


@pytest.mark.parametrize("seed", range(200))
def test_list_state_matches_reference_on_random_stream(seed):
    rng = random.Random(1000 + seed)
    mine, theirs = make_state_pair(rng)
    history: list[int] = []
    assert describe_state(mine) == describe_state(theirs)
    for _ in range(30):
        token = pick_token(rng, theirs.advance())
        history.append(token)
        assert mine.add(token) == theirs.add(token)
        assert describe_state(mine) == describe_state(theirs)
        roll = rng.random()
        if roll < 0.25:
            # fork, step the fork, then carry on with one of them (aliasing must agree)
            stateful = rng.random() < 0.8
            my_fork, their_fork = mine.copy(stateful=stateful), theirs.copy(stateful=stateful)
            assert describe_state(my_fork) == describe_state(their_fork)
            token = pick_token(rng, their_fork.advance())
            assert my_fork.add(token) == their_fork.add(token)
            assert describe_state(my_fork) == describe_state(their_fork)
            assert describe_state(mine) == describe_state(theirs)
            if rng.random() < 0.5:
                mine, theirs = my_fork, their_fork
        elif roll < 0.35:
            cut = rng.randint(0, len(history))
            mine.reset(history[:cut]), theirs.reset(history[:cut])
            assert describe_state(mine) == describe_state(theirs)
    mine.reset(None), theirs.reset(None)
    assert describe_state(mine) == describe_state(theirs)


def _advance_banks(module, constraints, pre_seq):
    """What constrained beam search does for one beam: replay the sequence, then fork one
    state per proposed token and read each fork's bank (see step_sentence_constraint)."""
    state = module.ConstraintListState(constraints)
    state.reset(pre_seq)
    banks = []
    for token in state.advance() or []:
        fork = state.copy(stateful=True)
        fork.add(token)
        banks.append((token, fork.get_bank(), fork.completed))
    return banks


@pytest.mark.parametrize(
    "make, pre_seq",
    [
        (lambda m: [m.DisjunctiveConstraint([[5, 6], [5, 7]])], [1, 5]),
        (lambda m: [m.DisjunctiveConstraint([[5, 6, 8], [5, 7]]), m.PhrasalConstraint([2])], [5]),
        (lambda m: [m.PhrasalConstraint([1, 2, 3]), m.PhrasalConstraint([4])], [1]),
        (lambda m: [m.PhrasalConstraint([1, 2]), m.DisjunctiveConstraint([[3], [4, 4]])], []),
    ],
)
def test_beam_style_forks_give_reference_banks(make, pre_seq):
    mine = _advance_banks(gl, make(gl), pre_seq)
    theirs = _advance_banks(ref, make(ref), pre_seq)
    assert mine == theirs


def test_shared_progress_changes_banks_of_later_forks():
    # the second fork sees the first fork's token in the shared current_seq, so its token
    # breaks the option instead of completing it: bank 0, not 2 (as in the reference)
    banks = _advance_banks(gl, [gl.DisjunctiveConstraint([[5, 6], [5, 7]])], [5])
    assert banks == [(6, 2, True), (7, 0, False)]


def test_list_state_walkthrough():
    state = gl.ConstraintListState([gl.PhrasalConstraint([5, 6]), gl.PhrasalConstraint([9])])
    assert (state.max_seqlen, state.advance(), state.get_bank()) == (2, [5, 9], 0)
    assert state.add(5) == (False, True)
    assert (state.advance(), state.get_bank()) == ([6], 1)
    assert state.add(9) == (False, False)  # breaks the phrase in progress; not offered to [9]
    assert (state.advance(), state.get_bank()) == ([9, 5], 0)
    assert state.add(9) == (True, True)
    assert state.add(5) == (False, True) and state.add(6) == (True, True)
    assert (state.completed, state.get_bank(), state.advance()) == (True, 4, None)
    assert state.add(1) == (True, False)
    assert state.copy().completed is False  # the flag is not copied, as in the reference


def test_list_state_works_with_reference_constraint_objects():
    rng = random.Random(7)
    for _ in range(40):
        pairs = [make_pair(rng) for _ in range(rng.randint(1, 3))]
        mine = gl.ConstraintListState([t.copy() for _, t in pairs])
        theirs = ref.ConstraintListState([t.copy() for _, t in pairs])
        for _ in range(20):
            token = pick_token(rng, theirs.advance())
            assert mine.add(token) == theirs.add(token)
            assert describe_state(mine) == describe_state(theirs)


# ---------------------------------------------------------------- force_words_ids


class _Captured(Exception):
    pass


def reference_force_words(force_words_ids):
    """The constraints transformers' generate builds from ``force_words_ids`` (captured
    where it hands them to the beam scorer), or the exception type it raises."""
    import transformers.generation.utils as hf_utils
    from transformers import GPT2Config, GPT2LMHeadModel

    captured = {}

    class Scorer:
        def __init__(self, constraints, **_):
            captured["constraints"] = constraints
            raise _Captured

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=12, n_positions=16)
    model = GPT2LMHeadModel(config).eval()
    original = hf_utils.ConstrainedBeamSearchScorer
    hf_utils.ConstrainedBeamSearchScorer = Scorer
    try:
        model.generate(
            torch.tensor([[1, 2]]),
            num_beams=2,
            max_new_tokens=2,
            pad_token_id=0,
            force_words_ids=force_words_ids,
        )
    except _Captured:
        return [(type(c).__name__, c.token_ids) for c in captured["constraints"]]
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__
    finally:
        hf_utils.ConstrainedBeamSearchScorer = original
    raise AssertionError("generate did not reach the constrained beam scorer")


FORCE_WORDS_CASES = [
    [[1, 2]],
    [[1, 2], [[3], [4, 5]]],
    [[[3, 4], [5]], [6], [7, 8, 9]],
    [[0]],
    [],
    [[1, -1]],
    [[1, [2]]],
    [(1, 2)],
    [[[1], 3]],
    [[1.0]],
    [[[1], [1, 2]]],
    [[[1], []]],
    [[]],
    [5],
]


@pytest.mark.filterwarnings("ignore")
def test_force_words_ids_convert_like_reference_generate():
    for case in FORCE_WORDS_CASES:
        expected = reference_force_words(case)
        try:
            got = [(type(c).__name__, c.token_ids) for c in gl.constraints_from_force_words(case)]
        except ValueError as exc:
            assert "force_words_ids" in str(exc) or "nested_token_ids" in str(exc), case
            got = "ValueError"
        # where the reference trips over its own indexing ([[]], [5]) genlab says ValueError
        if expected in ("IndexError", "TypeError"):
            expected = "ValueError"
        assert got == expected, case


def test_force_words_errors_name_the_entry():
    with pytest.raises(ValueError, match=r"`force_words_ids\[1\]`.*\[\]"):
        gl.constraints_from_force_words([[1], []])
    with pytest.raises(ValueError, match=r"`force_words_ids\[0\]` lists alternatives"):
        gl.constraints_from_force_words([[[1], "x"]])
    with pytest.raises(ValueError, match="`force_words_ids` must be a non-empty list"):
        gl.constraints_from_force_words(None)
