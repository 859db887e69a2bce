from django.contrib import admin

from .models import Dataset, Item, UploadJob


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "created"]
    search_fields = ["name"]


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    list_display = ["external_id", "dataset", "position"]
    list_select_related = ["dataset"]
    search_fields = ["external_id"]
    raw_id_fields = ["dataset"]


@admin.register(UploadJob)
class UploadJobAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "status", "items_imported", "error_count", "created", "finished"]
    list_filter = ["status"]
    readonly_fields = ["report"]
