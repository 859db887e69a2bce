from django.contrib import admin

from .models import Evaluation, ExcludedItem, JudgeOnlyVersion, Rater, Rating, RatingRevision


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "dataset", "overlap", "created"]
    filter_horizontal = ["rubric_versions", "annotators"]
    raw_id_fields = ["dataset"]


@admin.register(ExcludedItem)
class ExcludedItemAdmin(admin.ModelAdmin):
    list_display = ["evaluation", "item", "reason"]
    raw_id_fields = ["evaluation", "item"]
    search_fields = ["reason"]


@admin.register(Rater)
class RaterAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "project", "user"]
    list_filter = ["kind"]
    search_fields = ["name"]


class RatingRevisionInline(admin.TabularInline):
    model = RatingRevision
    extra = 0
    readonly_fields = ["value", "explanation", "side_shown", "seconds_spent", "created", "replaced"]


@admin.register(Rating)
class RatingAdmin(admin.ModelAdmin):
    list_display = ["item", "rubric_version", "rater", "value", "parse_failed", "updated"]
    list_filter = ["parse_failed", "rater__kind"]
    raw_id_fields = ["item", "evaluation", "rubric_version", "rater"]
    inlines = [RatingRevisionInline]


@admin.register(RatingRevision)
class RatingRevisionAdmin(admin.ModelAdmin):
    list_display = ["rating", "value", "created", "replaced"]
    raw_id_fields = ["rating"]


@admin.register(JudgeOnlyVersion)
class JudgeOnlyVersionAdmin(admin.ModelAdmin):
    list_display = ["rubric_version", "evaluation", "created"]
    raw_id_fields = ["evaluation", "rubric_version"]
