"""Small filters for showing dialogs: which side of the chat a turn sits on, and its text."""

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from datasets.models import Item
from datasets.records import ItemRecord

register = template.Library()

SYSTEM_SPEAKERS = {"SYSTEM"}


@register.filter
def turn_side(turn: dict[str, Any], item: Item | ItemRecord) -> str:
    """CSS class for a turn: turns by the rated response's speaker sit on the bot side."""
    speaker = str(turn.get("speaker", ""))
    if speaker.upper() in SYSTEM_SPEAKERS:
        return "system"
    response_speaker = str((item.response or {}).get("speaker", ""))
    return "bot" if speaker == response_speaker else "user"


EMPTY_TEXT = "(empty response)"


@register.filter
def turn_text(turn: dict | None, limit: int | None = None) -> str | SafeString:
    """A turn's text as stored (autoescaped; cut to `limit` characters when given), or a marked
    "(empty response)" when it is empty or blank, so an empty answer is never mistaken for a missing one."""
    text = str((turn or {}).get("text", ""))
    if text.strip():
        return Truncator(text).chars(limit) if limit else text
    return format_html('<span class="empty-text" data-role="empty-text">{}</span>', EMPTY_TEXT)
