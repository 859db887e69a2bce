"""Small filters for showing dialogs: which side of the chat a turn sits on."""

from django import template

register = template.Library()

SYSTEM_SPEAKERS = {"SYSTEM"}


@register.filter
def turn_side(turn: dict, item) -> str:
    """CSS class for a turn: turns by the rated response's speaker sit on the bot side."""
    speaker = str(turn.get("speaker", ""))
    if speaker.upper() in SYSTEM_SPEAKERS:
        return "system"
    response_speaker = str((item.response or {}).get("speaker", ""))
    return "bot" if speaker == response_speaker else "user"
