from django.contrib import admin

from .models import ReportCache


@admin.register(ReportCache)
class ReportCacheAdmin(admin.ModelAdmin):
    list_display = ["evaluation", "key", "fingerprint", "seconds", "computed", "computing", "failed"]
    raw_id_fields = ["evaluation"]
