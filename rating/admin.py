from django.contrib import admin

from .models import Assignment, KeyboardSettings, RaterView, Slot


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


@admin.register(KeyboardSettings)
class KeyboardSettingsAdmin(admin.ModelAdmin):
    list_display = ["user", "shortcuts_on"]
    raw_id_fields = ["user"]


@admin.register(RaterView)
class RaterViewAdmin(admin.ModelAdmin):
    list_display = ["evaluation"]
    raw_id_fields = ["evaluation"]
