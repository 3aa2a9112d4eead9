from django.apps import AppConfig


class ShopConfig(AppConfig):
    # In the tutorial the app is a top-level `shop`; here it lives inside the test project.
    name = "testproject.shop"
    label = "shop"
