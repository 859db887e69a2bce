from django.urls import path

from . import views

urlpatterns = [
    path("p/<slug:slug>/datasets/upload/", views.dataset_upload, name="dataset_upload"),
    path("p/<slug:slug>/datasets/uploads/<int:job_id>/", views.dataset_upload_job, name="dataset_upload_job"),
    path(
        "p/<slug:slug>/datasets/uploads/<int:job_id>/requeue/",
        views.dataset_upload_requeue,
        name="dataset_upload_requeue",
    ),
    path(
        "p/<slug:slug>/datasets/uploads/<int:job_id>/mapping/",
        views.dataset_upload_mapping,
        name="dataset_upload_mapping",
    ),
    path("p/<slug:slug>/datasets/<int:pk>/", views.dataset_detail, name="dataset_detail"),
    path("p/<slug:slug>/datasets/<int:pk>/items/<int:item_pk>/", views.item_detail, name="item_detail"),
]
