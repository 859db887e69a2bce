"""A person's single-key shortcuts on the rating page: whether they are on, and which key does what.

Digits always pick scale values (the digit beside each value), so no action can be bound to one.
Enter (submit) and Esc (leave a text box) are not character keys and stay as they are.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from .models import KeyboardSettings

# (action, what it does), in the order the settings form and the page list them.
ACTIONS: list[tuple[str, str]] = [
    ("A", "pick A (pairwise)"),
    ("SAME", "pick SAME (pairwise)"),
    ("B", "pick B (pairwise)"),
    ("skip", "go to the skip reason"),
    ("undo", "undo the last submit"),
    ("guidelines", "open or close the guidelines"),
]
DEFAULT_KEYS = {"A": "a", "SAME": "s", "B": "b", "skip": "k", "undo": "u", "guidelines": "g"}


@dataclass
class Shortcuts:
    on: bool
    keys: dict[str, str]  # every action -> its key

    def key(self, action: str) -> str:
        """The action's key, or "" when shortcuts are off (the page then shows no key for it)."""
        return self.keys[action] if self.on else ""


def shortcuts_of(user: User | int) -> Shortcuts:
    user_id = user if isinstance(user, int) else user.pk
    found = KeyboardSettings.objects.filter(user_id=user_id).first()
    if found is None:
        return Shortcuts(on=True, keys=dict(DEFAULT_KEYS))
    return Shortcuts(on=found.shortcuts_on, keys={**DEFAULT_KEYS, **known_keys(found.keys)})


def known_keys(keys: object) -> dict[str, str]:
    """The rebound keys kept for known actions (an action since removed is left out)."""
    if not isinstance(keys, dict):
        return {}
    return {action: key for action, key in keys.items() if action in DEFAULT_KEYS and isinstance(key, str)}


def read_keys(data: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The key of each action from a submitted form (`key-<action>`), and the problems per field.

    A key must be one printable, non-space character other than a digit, and no two actions may share
    one (letters count as the same key in either case: the page reads them in lower case).
    """
    keys: dict[str, str] = {}
    errors: dict[str, str] = {}
    for action, label in ACTIONS:
        field = f"key-{action}"
        raw = str(data.get(field) or "")
        key = raw.strip().lower() if raw.strip() else raw
        if len(key) != 1 or not key.isprintable() or key.isspace():
            errors[field] = f"The key to {label} must be one character (got “{raw}”)."
        elif key.isdigit():
            errors[field] = f"The key to {label} cannot be the digit {key}: digits pick scale values."
        else:
            keys[action] = key
    by_key: dict[str, list[str]] = {}
    for action, key in keys.items():
        by_key.setdefault(key, []).append(action)
    labels = dict(ACTIONS)
    for key, actions in by_key.items():
        if len(actions) > 1:
            for action in actions[1:]:
                others = ", ".join(labels[other] for other in actions if other != action)
                errors[f"key-{action}"] = f"The key “{key}” is already used to {others}."
    return keys, errors


def save_shortcuts(*, user: User, on: bool, keys: dict[str, str]) -> KeyboardSettings:
    """Keep the person's choice; `keys` must come from `read_keys` without errors."""
    rebound = {action: key for action, key in keys.items() if DEFAULT_KEYS.get(action) != key}
    found, _ = KeyboardSettings.objects.update_or_create(
        user=user, defaults={"shortcuts_on": on, "keys": rebound}
    )
    return found
