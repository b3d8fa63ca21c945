"""Constraints for constrained beam search: phrases that must appear in the output.

A *constraint* is a small state machine over generated tokens. It proposes the token(s)
that would move it forward (``advance``), says whether a token would (``does_advance``),
consumes a token (``update``, which returns ``(stepped, completed, reset)``) and reports
how many tokens are still missing (``remaining``). :class:`ConstraintListState` tracks a
whole list of them for one hypothesis and turns the progress into a *bank* number that
constrained beam search sorts candidates by.

The behaviour follows transformers 4.56.2 (``generation/beam_constraints.py``) exactly,
including a few quirks that change beam-search results and are therefore kept:

* ``PhrasalConstraint.reset()`` puts the phrase at index 0 (as if its first token had
  been matched), not back at the start. Inside :class:`ConstraintListState` a broken
  phrase is always replaced by a fresh copy, so the quirk only shows when a constraint
  is driven by hand.
* ``DisjunctiveConstraint.copy(stateful=True)`` shares its ``current_seq`` list with the
  original, so stepping the copy also steps the original (until either is reset).
  Constrained beam search copies one state per proposed token, so later copies see the
  tokens added to earlier ones.
* ``ConstraintListState.copy()`` does not copy the ``completed`` flag.

Example::

    >>> state = ConstraintListState([PhrasalConstraint([5, 6]), PhrasalConstraint([9])])
    >>> state.advance()
    [5, 9]
    >>> state.add(5), state.advance(), state.get_bank()
    ((False, True), [6], 1)
    >>> state.add(6), state.add(9), state.completed
    ((True, True), (True, True), True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..ids import is_token_id

__all__ = [
    "Constraint",
    "PhrasalConstraint",
    "DisjunctiveTrie",
    "DisjunctiveConstraint",
    "ConstraintListState",
    "constraints_from_force_words",
]

# A well-formed constraint completes within this many advance/update rounds in test().
_MAX_TEST_STEPS = 10_000


def _is_token_id(value: Any) -> bool:
    """A non-negative token id (:func:`genlab.ids.is_token_id`: never a bool; the
    reference's ``isinstance(value, int)`` would take ``True`` as id 1)."""
    return is_token_id(value) and int(value) >= 0


def _require_int(name: str, value: Any) -> None:
    """Raise TypeError (as the reference does) when a token id is not a Python int."""
    if not isinstance(value, int):
        raise TypeError(
            f"`{name}` must be a Python int, got {value!r} of type {type(value).__name__}; "
            "convert tensors with .tolist() or int()."
        )


class Constraint(ABC):
    """Base class of every constraint.

    A subclass must make this loop end::

        done = False
        while not done:
            _, done, _ = constraint.update(constraint.advance())

    Calling ``Constraint.__init__`` runs :meth:`test` to check that. The built-in
    constraints do not call it (as in the reference), so a fresh built-in constraint
    starts untouched.
    """

    def __init__(self):
        self.test()

    def test(self) -> None:
        """Drive the constraint to completion with its own proposals; raise if it fails.

        Leaves the constraint in its completed state. After the first step it resets the
        constraint once, to exercise ``reset``.
        """
        steps = 0
        completed = False
        while not completed:
            if steps == 1:
                self.reset()
            token = self.advance()
            if not self.does_advance(token):
                raise ValueError(
                    f"{type(self).__name__} is not defined correctly: does_advance(advance()) "
                    f"returned False for advance() = {token!r}; the proposed token must count "
                    "as progress."
                )
            _, completed, _ = self.update(token)
            steps += 1
            if steps > _MAX_TEST_STEPS:
                raise ValueError(
                    f"{type(self).__name__} is not defined correctly: update(advance()) did not "
                    f"complete it within {_MAX_TEST_STEPS} steps."
                )
        if self.remaining() != 0:
            raise ValueError(
                f"{type(self).__name__} is not defined correctly: remaining() is "
                f"{self.remaining()} after completion, expected 0."
            )

    @abstractmethod
    def advance(self) -> int | list[int] | None:
        """The token (int) or tokens (list) that move the constraint forward; None if none."""

    @abstractmethod
    def does_advance(self, token_id: int) -> bool:
        """Whether ``token_id`` would move the constraint forward (no state change)."""

    @abstractmethod
    def update(self, token_id: int) -> tuple[bool, bool, bool]:
        """Consume a generated token; return ``(stepped, completed, reset)``."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the progress made (called when an unwanted token breaks it)."""

    @abstractmethod
    def remaining(self) -> int:
        """How many more tokens are needed to complete the constraint."""

    @abstractmethod
    def copy(self, stateful: bool = False) -> Constraint:
        """A new constraint with the same tokens; with ``stateful`` also the progress."""


class PhrasalConstraint(Constraint):
    """The output must contain ``token_ids`` in this order, contiguously.

    State: ``fulfilled_idx`` is the index of the last matched token (-1: none yet) and
    ``completed`` is True once the whole phrase was matched. ``seqlen`` is the phrase length.

    Example::

        >>> c = PhrasalConstraint([7, 8])
        >>> c.advance(), c.update(7), c.advance(), c.update(8), c.remaining()
        (7, (True, False, False), 8, (True, True, False), 0)
    """

    def __init__(self, token_ids: list[int]):
        if not isinstance(token_ids, list) or len(token_ids) == 0:
            raise ValueError(
                f"`token_ids` must be a non-empty list of token ids, got {token_ids!r}."
            )
        bad = [t for t in token_ids if not _is_token_id(t)]
        if bad:
            raise ValueError(
                f"`token_ids` must contain only non-negative ints, got {token_ids!r} "
                f"(offending entries: {bad!r})."
            )
        self.token_ids = token_ids
        self.seqlen = len(token_ids)
        self.fulfilled_idx = -1
        self.completed = False

    def _next_token(self) -> int:
        # IndexError when the phrase was reset after completing a one-token phrase (as in
        # the reference: reset() leaves fulfilled_idx at 0).
        return self.token_ids[self.fulfilled_idx + 1]

    def advance(self) -> int | None:
        """The next token id of the phrase (None once completed)."""
        return None if self.completed else self._next_token()

    def does_advance(self, token_id: int) -> bool:
        """Whether token_id is the next token of the phrase."""
        _require_int("token_id", token_id)
        return False if self.completed else token_id == self._next_token()

    def update(self, token_id: int) -> tuple[bool, bool, bool]:
        """Feed token_id; returns ``(stepped, completed, reset)``.

        stepped: it was the next token; completed: the phrase is now whole; reset: it broke the
        partial match, which starts again from the beginning.
        """
        _require_int("token_id", token_id)
        if not self.does_advance(token_id):
            self.reset()
            return False, False, True
        self.fulfilled_idx += 1
        self.completed = self.fulfilled_idx == self.seqlen - 1
        return True, self.completed, False

    def reset(self) -> None:
        # Reference quirk kept on purpose: index 0, not -1 (see the module docstring).
        """Forget the partial match (back to the first token of the phrase)."""
        self.completed = False
        self.fulfilled_idx = 0

    def remaining(self) -> int:
        """How many tokens of the phrase are still to come."""
        return self.seqlen - (self.fulfilled_idx + 1)

    def copy(self, stateful: bool = False) -> PhrasalConstraint:
        """A new constraint on the same phrase; stateful: also copy the progress made so far."""
        other = PhrasalConstraint(self.token_ids)
        if stateful:
            other.fulfilled_idx = self.fulfilled_idx
            other.completed = self.completed
        return other

    def __repr__(self) -> str:
        return f"PhrasalConstraint({self.token_ids!r})"


class DisjunctiveTrie:
    """A prefix tree of several token sequences, as nested dicts ``{token: subtree}``.

    ``max_height`` is the length of the longest sequence. With ``no_subsets`` (default) no
    sequence may be a prefix of, or equal to, another one (each must end in its own leaf).

    Example::

        >>> t = DisjunctiveTrie([[1, 2], [1, 3], [4]])
        >>> t.trie, t.next_tokens([1]), t.reached_leaf([1, 3])
        ({1: {2: {}, 3: {}}, 4: {}}, [2, 3], True)
    """

    def __init__(self, nested_token_ids: list[list[int]], no_subsets: bool = True):
        self.max_height = max(len(seq) for seq in nested_token_ids)
        root: dict = {}
        for seq in nested_token_ids:
            node = root
            for token in seq:
                node = node.setdefault(token, {})
        if no_subsets and self.has_subsets(root, nested_token_ids):
            raise ValueError(
                "`nested_token_ids` must not contain an option that is a prefix of, or equal "
                f"to, another option ({_describe_overlaps(nested_token_ids)}); got "
                f"{nested_token_ids!r}. Remove the shorter or repeated option."
            )
        self.trie = root

    def next_tokens(self, current_seq: list[int]) -> list[int]:
        """Tokens that extend ``current_seq`` along the trie (KeyError if off the trie)."""
        node = self.trie
        for token in current_seq:
            node = node[token]
        return list(node)

    def reached_leaf(self, current_seq: list[int]) -> bool:
        return not self.next_tokens(current_seq)

    def count_leaves(self, root: dict) -> int:
        if not root:
            return 1
        return sum(self.count_leaves(child) for child in root.values())

    def has_subsets(self, trie: dict, nested_token_ids: list[list[int]]) -> bool:
        """True when some option does not end in a leaf of its own (leaves != options)."""
        return self.count_leaves(trie) != len(nested_token_ids)


def _describe_overlaps(nested_token_ids: list[list[int]]) -> str:
    """Name the first pair of options where one is a prefix of (or equal to) the other."""
    for i, a in enumerate(nested_token_ids):
        for j, b in enumerate(nested_token_ids):
            if i != j and len(a) <= len(b) and b[: len(a)] == a:
                relation = "equal to" if len(a) == len(b) else "a prefix of"
                return f"option {i} {a!r} is {relation} option {j} {b!r}"
    return "options overlap"


class DisjunctiveConstraint(Constraint):
    """The output must contain at least one of several token sequences.

    State: ``current_seq`` is the part of an option matched so far; ``completed`` is True
    once a whole option was matched. ``seqlen`` is the length of the longest option.

    Example::

        >>> c = DisjunctiveConstraint([[1, 2], [1, 3], [4]])
        >>> c.advance(), c.update(1), c.advance(), c.remaining()
        ([1, 4], (True, False, False), [2, 3], 1)

    Args:
        nested_token_ids: the options, each a non-empty list of token ids;
        _trie: internal, used by :meth:`copy` to share the options' trie.
    """

    def __init__(self, nested_token_ids: list[list[int]], *, _trie: DisjunctiveTrie | None = None):
        if _trie is None:
            _check_nested_token_ids(nested_token_ids)
            _trie = DisjunctiveTrie(nested_token_ids)
        self.trie = _trie
        self.token_ids = nested_token_ids
        self.seqlen = _trie.max_height
        self.current_seq: list[int] = []
        self.completed = False

    def advance(self) -> list[int] | None:
        """The token ids that would move the constraint forward (None once completed)."""
        return self.trie.next_tokens(self.current_seq) or None

    def does_advance(self, token_id: int) -> bool:
        """Whether token_id continues one of the options from the current state."""
        _require_int("token_id", token_id)
        return token_id in self.trie.next_tokens(self.current_seq)

    def update(self, token_id: int) -> tuple[bool, bool, bool]:
        """Feed token_id; returns ``(stepped, completed, reset)``.

        stepped: it continued an option; completed: an option is now whole; reset: it broke the
        partial match, which starts again from the beginning.
        """
        _require_int("token_id", token_id)
        stepped = self.does_advance(token_id)
        if stepped:
            self.current_seq.append(token_id)  # in place: stateful copies share this list
        else:
            self.reset()
        self.completed = self.trie.reached_leaf(self.current_seq)
        return stepped, self.completed, not stepped

    def reset(self) -> None:
        """Forget the partial match (back to the beginning of every option)."""
        self.completed = False
        self.current_seq = []

    def remaining(self) -> int:
        # an option shorter than the longest one completes with seqlen - len(...) > 0
        """How many tokens at least are still needed to complete an option."""
        return 0 if self.completed else self.seqlen - len(self.current_seq)

    def copy(self, stateful: bool = False) -> DisjunctiveConstraint:
        """A new constraint on the same options; stateful: also copy the progress made so far."""
        other = DisjunctiveConstraint(self.token_ids, _trie=self.trie)  # the trie is never mutated
        if stateful:
            other.current_seq = self.current_seq  # shared on purpose (see the module docstring)
            other.completed = self.completed
        return other

    def __repr__(self) -> str:
        return f"DisjunctiveConstraint({self.token_ids!r})"


def _check_nested_token_ids(nested_token_ids: Any) -> None:
    if not isinstance(nested_token_ids, list) or len(nested_token_ids) == 0:
        raise ValueError(
            "`nested_token_ids` must be a non-empty list of token-id lists, got "
            f"{nested_token_ids!r}."
        )
    for i, option in enumerate(nested_token_ids):
        if not isinstance(option, list):
            raise ValueError(
                f"`nested_token_ids` must be a list of lists, but option {i} is {option!r}; "
                "wrap a single sequence as [[...]]."
            )
        if len(option) == 0:
            raise ValueError(
                f"`nested_token_ids` option {i} is empty; every option needs at least one token."
            )
        if not all(_is_token_id(t) for t in option):
            raise ValueError(
                f"`nested_token_ids` must contain only non-negative ints, but option {i} is "
                f"{option!r}."
            )


class ConstraintListState:
    """Progress of one hypothesis through a list of constraints.

    At any time each constraint is *pending* (no progress), *in progress* (at most one) or
    *complete*. While a constraint is in progress only its next tokens are proposed; a
    token that breaks it sends a fresh copy back to the pending list.

    ``get_bank()`` scores the progress: ``max_seqlen`` per complete constraint plus
    ``max_seqlen - remaining()`` of the one in progress, where ``max_seqlen`` is the longest
    constraint's ``seqlen``.

    Example::

        >>> s = ConstraintListState([DisjunctiveConstraint([[1, 2], [3]])])
        >>> s.add(1), s.get_bank(), s.add(2), s.completed, s.get_bank()
        ((False, True), 1, (True, True), True, 2)
    """

    def __init__(self, constraints: list[Constraint]):
        if not isinstance(constraints, (list, tuple)) or len(constraints) == 0:
            raise ValueError(
                f"`constraints` must be a non-empty list of Constraint objects, got "
                f"{constraints!r}."
            )
        missing = [c for c in constraints if not hasattr(c, "seqlen")]
        if missing:
            raise ValueError(
                f"`constraints` entries need a `seqlen` attribute (the number of tokens needed "
                f"to complete them); {missing[0]!r} has none."
            )
        self.constraints = constraints
        self.max_seqlen = max(c.seqlen for c in constraints)
        self.n_constraints = len(constraints)
        self.completed = False
        self.init_state()

    def init_state(self) -> None:
        """Every constraint pending (as fresh copies), nothing in progress or complete."""
        self.complete_constraints: list[Constraint] = []
        self.inprogress_constraint: Constraint | None = None
        self.pending_constraints = [c.copy(stateful=False) for c in self.constraints]

    def get_bank(self) -> int:
        bank = len(self.complete_constraints) * self.max_seqlen
        if self.inprogress_constraint:  # truthiness, as in the reference
            bank += self.max_seqlen - self.inprogress_constraint.remaining()
        return bank

    def advance(self) -> list[int] | None:
        """Tokens that make progress: the in-progress constraint's next token(s) if there is
        one, else the first token(s) of every pending constraint. None when there are none."""
        sources = (
            self.pending_constraints
            if self.inprogress_constraint is None
            else [self.inprogress_constraint]
        )
        tokens: list[int] = []
        for constraint in sources:
            proposal = constraint.advance()
            if isinstance(proposal, int):
                tokens.append(proposal)
            elif isinstance(proposal, list):
                tokens.extend(proposal)
        return tokens or None

    def reset(self, token_ids: list[int] | None) -> None:
        """Start over and replay ``token_ids`` (the tokens generated so far), stopping early
        once every constraint is complete."""
        self.init_state()
        for token in token_ids or ():
            self.add(token)
            if self.completed:
                break

    def add(self, token_id: int) -> tuple[bool, bool]:
        """Consume one token; return ``(complete, stepped)`` for the constraint it touched."""
        if not isinstance(token_id, int):
            raise TypeError(
                f"`token_id` must be a Python int, got {token_id!r} of type "
                f"{type(token_id).__name__}; convert tensors with .tolist() or int()."
            )
        if self.completed:
            return True, False
        if self.inprogress_constraint is not None:
            return self._add_in_progress(token_id)
        return self._add_pending(token_id)

    def _add_in_progress(self, token_id: int) -> tuple[bool, bool]:
        # The token is offered only to the constraint in progress, never to the pending ones.
        stepped, complete, was_reset = self.inprogress_constraint.update(token_id)
        if was_reset:
            self.pending_constraints.append(self.inprogress_constraint.copy(stateful=False))
            self.inprogress_constraint = None
        if complete:
            self.complete_constraints.append(self.inprogress_constraint)
            self.inprogress_constraint = None
            if not self.pending_constraints:
                self.completed = True
        return complete, stepped

    def _add_pending(self, token_id: int) -> tuple[bool, bool]:
        # The first pending constraint the token advances takes it; only one steps per token.
        for index, constraint in enumerate(self.pending_constraints):
            if not constraint.does_advance(token_id):
                continue
            stepped, complete, _ = constraint.update(token_id)
            if not stepped:
                raise ValueError(
                    f"{constraint!r} is not defined correctly: update({token_id}) made no "
                    "progress although does_advance() returned True."
                )
            if complete:
                self.complete_constraints.append(constraint)
                self.inprogress_constraint = None
            else:
                self.inprogress_constraint = constraint
            del self.pending_constraints[index]
            if not self.pending_constraints and self.inprogress_constraint is None:
                self.completed = True
            return complete, stepped
        return False, False

    def copy(self, stateful: bool = True) -> ConstraintListState:
        """A new state over the same constraints; with ``stateful`` (default) it also copies
        the progress (but not the ``completed`` flag, as in the reference)."""
        other = ConstraintListState(self.constraints)
        if stateful:
            other.complete_constraints = [c.copy(stateful=True) for c in self.complete_constraints]
            if self.inprogress_constraint is not None:
                other.inprogress_constraint = self.inprogress_constraint.copy(stateful=True)
            other.pending_constraints = [c.copy() for c in self.pending_constraints]
        return other


def constraints_from_force_words(force_words_ids: Any) -> list[Constraint]:
    """Turn the ``force_words_ids`` config field into constraints, as ``generate`` does.

    Each entry is either a list of ints (a phrase that must appear: PhrasalConstraint) or a
    list of such lists (one of them must appear: DisjunctiveConstraint); an entry counts as
    nested when its first element is a list.

    Args:
        force_words_ids: ``list[list[int]]`` or ``list[list[list[int]]]`` (mixed is fine).

    Returns:
        one constraint per entry, in order.

    Example::

        >>> constraints_from_force_words([[5, 6], [[7], [8, 9]]])
        [PhrasalConstraint([5, 6]), DisjunctiveConstraint([[7], [8, 9]])]
    """
    if not isinstance(force_words_ids, list) or len(force_words_ids) == 0:
        raise ValueError(
            "`force_words_ids` must be a non-empty list[list[int]] or list[list[list[int]]], "
            f"got {force_words_ids!r}."
        )
    return [_constraint_for_entry(i, entry) for i, entry in enumerate(force_words_ids)]


def _constraint_for_entry(index: int, entry: Any) -> Constraint:
    where = f"`force_words_ids[{index}]`"
    if not isinstance(entry, list) or len(entry) == 0:
        raise ValueError(
            f"{where} must be a non-empty list of token ids (a phrase) or of token-id lists "
            f"(alternatives), got {entry!r}."
        )
    if isinstance(entry[0], list):
        for option in entry:
            if not isinstance(option, list) or not all(_is_token_id(t) for t in option):
                raise ValueError(
                    f"{where} lists alternatives, so each must be a list of non-negative ints; "
                    f"got {option!r} in {entry!r}."
                )
        return DisjunctiveConstraint(entry)
    if not all(_is_token_id(t) for t in entry):
        raise ValueError(
            f"{where} must be a list of non-negative ints (or of lists of them), got {entry!r}."
        )
    return PhrasalConstraint(entry)
