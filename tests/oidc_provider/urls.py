from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(template_name="login.html")),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
