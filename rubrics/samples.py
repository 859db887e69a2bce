"""A built-in sample item, so a rubric's live preview works before a project has any dataset."""

from datasets.records import ItemRecord

SAMPLE_ITEM = ItemRecord(
    external_id="sample",
    context=[
        {"speaker": "USER", "text": "I finally got tickets for the concert on Saturday!"},
        {"speaker": "BOT", "text": "That's great news! Which band are you going to see?"},
        {
            "speaker": "USER",
            "text": "The Lumineers. I've waited three years for this, I'm so nervous it gets cancelled.",
        },
    ],
    response={
        "speaker": "BOT",
        "text": "Three years is a long wait, no wonder you're nervous! It sounds like it means a lot to you.",
    },
    baseline={"speaker": "BOT", "text": "The Lumineers are a band. Concerts are sometimes cancelled."},
    metadata={"topic": "Concert"},
)
