"""List prices of mainstream models, offered on the judge form (shown with their date, always editable).

USD per million tokens, input / output, standard (not batch, not cached-input) tier, as the providers' own
pricing pages listed them on DATE (OpenAI's API pricing, Anthropic's pricing, Google's Gemini API pricing;
Gemini 2.5 Pro at prompts up to 200k tokens). Prices change: a judge keeps the prices it was given, and
the form says from when these are. A model missing here simply gets no offer.
"""

from __future__ import annotations

from decimal import Decimal

DATE = "2025-10-01"
SOURCE = "the providers' published API pricing pages"

LIST_PRICES: dict[str, tuple[Decimal, Decimal]] = {
    name: (Decimal(price_in), Decimal(price_out))
    for name, price_in, price_out in [
        ("gpt-5", "1.25", "10.00"),
        ("gpt-5-mini", "0.25", "2.00"),
        ("gpt-5-nano", "0.05", "0.40"),
        ("gpt-4.1", "2.00", "8.00"),
        ("gpt-4.1-mini", "0.40", "1.60"),
        ("gpt-4.1-nano", "0.10", "0.40"),
        ("gpt-4o", "2.50", "10.00"),
        ("gpt-4o-mini", "0.15", "0.60"),
        ("o3", "2.00", "8.00"),
        ("o4-mini", "1.10", "4.40"),
        ("claude-opus-4-1", "15.00", "75.00"),
        ("claude-sonnet-4-5", "3.00", "15.00"),
        ("claude-sonnet-4", "3.00", "15.00"),
        ("claude-haiku-4-5", "1.00", "5.00"),
        ("claude-3-5-haiku", "0.80", "4.00"),
        ("gemini-2.5-pro", "1.25", "10.00"),
        ("gemini-2.5-flash", "0.30", "2.50"),
        ("gemini-2.5-flash-lite", "0.10", "0.40"),
    ]
}


def list_price(model: str) -> tuple[str, Decimal, Decimal] | None:
    """(listed name, input, output) for a model id: exact, or a dated snapshot of a listed model
    (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`), after any router prefix (`openai/gpt-4o`);
    the longest listed name wins, so `gpt-4o-mini` is never priced as `gpt-4o`."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    found = [
        listed
        for listed in LIST_PRICES
        if name == listed or (name.startswith(listed + "-") and name[len(listed) + 1 :][:1].isdigit())
    ]
    if not found:
        return None
    listed = max(found, key=len)
    return (listed, *LIST_PRICES[listed])
