"""Routes of the health app: `api_urls` go under /api/v1/, `page_urls` at the site root."""

from django.urls import path

from topoweb.health import apis, views

api_urls = [
    path(
        "servers/<str:hostname>/acceptance/",
        apis.ServerAcceptanceApi.as_view(),
        name="server-acceptance",
    ),
    path(
        "skus/<path:sku_name>/acceptance/",
        apis.SkuAcceptanceApi.as_view(),
        name="sku-acceptance",
    ),
]

page_urls = [
    path(
        "servers/<str:hostname>/acceptance/",
        views.server_acceptance_page,
        name="server-acceptance-page",
    ),
    path("skus/<path:sku_name>/acceptance/", views.sku_acceptance_page, name="sku-acceptance-page"),
]
