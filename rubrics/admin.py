from django.contrib import admin

from .models import Rubric, RubricVersion


class RubricVersionInline(admin.StackedInline):
    model = RubricVersion
    extra = 0
    show_change_link = True


@admin.register(Rubric)
class RubricAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "project", "builtin_key"]
    list_filter = ["kind"]
    search_fields = ["name"]
    inlines = [RubricVersionInline]


@admin.register(RubricVersion)
class RubricVersionAdmin(admin.ModelAdmin):
    list_display = ["rubric", "number", "criterion", "target", "created"]
    list_select_related = ["rubric"]
    search_fields = ["rubric__name", "criterion"]
