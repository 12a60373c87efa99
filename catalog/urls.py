from django.urls import path

from . import views, views_fit

app_name = "catalog"

urlpatterns = [
    path("", views.home, name="home"),
    path("gpus/", views.gpu_list, name="gpu-list"),
    path("gpus/<slug:slug>/", views.gpu_detail, name="gpu-detail"),
    path("workloads/<slug:slug>/", views.workload_detail, name="workload-detail"),
    path("compare/", views.compare, name="compare"),
    path("fit/", views_fit.fit, name="fit"),
]
