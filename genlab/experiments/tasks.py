"""Tasks with exact checkers, for :func:`genlab.coverage_curve` and the lesson on spending
compute at decoding time.

:func:`capitals` gives 59 prompts "The capital of <country> is" whose continuation the
demo model (SmolLM2-135M) gets right greedily for about half of the countries
(``benchmarks/README.md`` has the measured rate): well-known capitals it knows, others it
dodges ("the capital of the ...") or confuses with the largest city (Sydney, Istanbul,
Lagos). So drawing more samples has room to help, and majority vote has ways to fail.

A task's answer is the first word of the continuation when that word starts with a capital
letter (a name), compared without case, accents or punctuation (the accepted spellings of
one capital count as one answer); a continuation that starts otherwise has no answer.

>>> task = capitals()[0]
>>> task.prompt, task.extract(" Paris.")
('The capital of France is', 'paris')
>>> task.check(" Paris.\\n"), task.check(" the capital of the")
(True, False)
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

#: country -> its capital (the first word is what is checked) and other accepted spellings
CAPITALS: dict[str, tuple[str, ...]] = {
    "France": ("Paris",), "Germany": ("Berlin",), "Italy": ("Rome",), "Spain": ("Madrid",),
    "Japan": ("Tokyo",), "Canada": ("Ottawa",), "Australia": ("Canberra",),
    "Brazil": ("Brasília",), "Egypt": ("Cairo",), "Kenya": ("Nairobi",), "Peru": ("Lima",),
    "Norway": ("Oslo",), "Mongolia": ("Ulaanbaatar", "Ulan"), "Nepal": ("Kathmandu",),
    "Chile": ("Santiago",), "Argentina": ("Buenos Aires",), "Turkey": ("Ankara",),
    "Nigeria": ("Abuja",), "Pakistan": ("Islamabad",), "Vietnam": ("Hanoi",),
    "Morocco": ("Rabat",), "Switzerland": ("Bern", "Berne"), "New Zealand": ("Wellington",),
    "Kazakhstan": ("Astana",), "Ghana": ("Accra",), "Ethiopia": ("Addis Ababa",),
    "Colombia": ("Bogotá",), "Venezuela": ("Caracas",), "Iceland": ("Reykjavík",),
    "Finland": ("Helsinki",), "Poland": ("Warsaw",), "Hungary": ("Budapest",),
    "Romania": ("Bucharest",), "Ukraine": ("Kyiv", "Kiev"), "Iran": ("Tehran",),
    "Iraq": ("Baghdad",), "Thailand": ("Bangkok",), "Indonesia": ("Jakarta",),
    "Philippines": ("Manila",), "Cuba": ("Havana",), "Portugal": ("Lisbon",),
    "Greece": ("Athens",), "Sweden": ("Stockholm",), "Denmark": ("Copenhagen",),
    "Ireland": ("Dublin",), "Austria": ("Vienna",), "Belgium": ("Brussels",),
    "Netherlands": ("Amsterdam",), "Uganda": ("Kampala",), "Senegal": ("Dakar",),
    "Zimbabwe": ("Harare",), "Jordan": ("Amman",), "Syria": ("Damascus",),
    "Lebanon": ("Beirut",), "Malaysia": ("Kuala Lumpur",), "Ecuador": ("Quito",),
    "Uruguay": ("Montevideo",), "Paraguay": ("Asunción",), "Laos": ("Vientiane",),
}  # fmt: skip


def normalize(word: str) -> str:
    """A word as answers are compared: no accents, no case, no surrounding punctuation."""
    plain = unicodedata.normalize("NFKD", word)
    plain = "".join(ch for ch in plain if not unicodedata.combining(ch))
    return plain.strip(".,;:!?\"'()[]").casefold()


@dataclass(frozen=True)
class Task:
    """One prompt with an exact checker: ``prompt``, the accepted ``answers`` (normalized
    first words) and the ``name`` of what is asked."""

    name: str
    prompt: str
    answers: tuple[str, ...]

    def extract(self, text: str) -> str | None:
        """The answer of a continuation: its first word when it starts with a capital
        letter (normalized, :func:`normalize`; an accepted spelling is given as the first,
        so that "Kiev" and "Kyiv" vote together); None otherwise.

        text: the generated continuation (without the prompt)."""
        words = text.split()
        if not words or not words[0][:1].isupper():
            return None
        word = normalize(words[0])
        return self.answers[0] if word in self.answers else word or None

    def check(self, text: str) -> bool:
        """Whether the continuation ``text`` gives an accepted answer."""
        return self.extract(text) in self.answers


def capitals() -> list[Task]:
    """The capital-city tasks ("The capital of France is" -> Paris), one per country of
    :data:`CAPITALS`, in that order."""
    return [
        Task(
            country,
            f"The capital of {country} is",
            tuple(dict.fromkeys(normalize(c.split()[0]) for c in names)),
        )  # fmt: skip
        for country, names in CAPITALS.items()
    ]


__all__ = ["Task", "capitals", "normalize", "CAPITALS"]
