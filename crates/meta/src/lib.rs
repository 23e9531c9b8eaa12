//! The meta-plugin: delegate planning, runtime config, rollback, cache, default-route, isolation, hot-plug
