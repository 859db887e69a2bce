from django.contrib import admin

from .models import Assignment, Slot


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ["evaluation", "item", "user", "status", "reserved_until", "left_side", "seconds_spent"]
    list_filter = ["status"]
    raw_id_fields = ["evaluation", "item", "user"]


@admin.register(Slot)
class SlotAdmin(admin.ModelAdmin):
    list_display = ["evaluation", "item", "rank", "claims", "is_open"]
    list_filter = ["is_open"]
    raw_id_fields = ["evaluation", "item"]
