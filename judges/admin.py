from django.contrib import admin

from .models import CachedReply, Judge, JudgeBatch, JudgeCall, JudgeRun


@admin.register(Judge)
class JudgeAdmin(admin.ModelAdmin):
    # api_key_env names a declared variable; a pasted key is stored encrypted, not editable here, and only
    # its hint (sk-...abcd) is shown.
    list_display = ["name", "project", "model", "base_url", "api_key_env", "api_key_hint", "simulated"]
    list_filter = ["simulated"]
    search_fields = ["name", "model"]


@admin.register(JudgeRun)
class JudgeRunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "judge",
        "evaluation",
        "rubric_version",
        "status",
        "total_calls",
        "created",
        "finished",
    ]
    list_filter = ["status", "mode"]
    raw_id_fields = ["judge", "evaluation", "rubric_version", "rater"]


@admin.register(JudgeCall)
class JudgeCallAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "run",
        "item",
        "sample",
        "swapped",
        "status",
        "attempts",
        "value",
        "parse_failed",
        "cached",
    ]
    list_filter = ["status", "parse_failed", "cached"]
    raw_id_fields = ["run", "item", "batch"]


@admin.register(JudgeBatch)
class JudgeBatchAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "run",
        "remote_id",
        "status",
        "requests",
        "completed",
        "failed",
        "collected",
        "created",
    ]
    list_filter = ["status", "collected"]
    search_fields = ["remote_id"]
    raw_id_fields = ["run"]


@admin.register(CachedReply)
class CachedReplyAdmin(admin.ModelAdmin):
    list_display = ["key", "model", "finish_reason", "prompt_tokens", "completion_tokens", "created"]
    search_fields = ["key", "model"]
