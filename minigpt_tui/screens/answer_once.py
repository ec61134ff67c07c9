"""A modal screen that answers once: keys and clicks can arrive faster than the screen closes
(enter then escape in one burst), and a second `dismiss` would call the caller's callback again and
pop the screen beneath (Textual's InvalidStateError, ScreenStackError: the app exited)."""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.screen import ModalScreen

Result = TypeVar("Result")


class AnswerOnceScreen(ModalScreen[Result], Generic[Result]):
    """`answer(result)` dismisses the screen with the first result; later ones are dropped."""

    _answered = False

    def answer(self, result: Result | None = None) -> None:
        if self._answered or not self.is_attached:
            return
        self._answered = True
        self.dismiss(result)
