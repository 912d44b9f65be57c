# expect: memory
# A callback (closure) subscribed on every call, never unsubscribed.
_listeners = []


def f(x):
    def on_event(event, x=x):
        return event + x

    _listeners.append(on_event)
    return x * 3
