//! The settings each room of the daemon owns, assembled from the [`Config`]: a key the operator
//! set wins, an unset one (`None` in the config) takes the room's own default. Here, in the
//! composition root, so that `config` never imports the rooms whose settings it reads.
//!
//! Key functions: [`queue_limits`] (actors), [`compile_limits`] (service), [`context_limits`]
//! (contexts). Cost: a few copies, once at start-up.

use crate::actors::model::QueueLimits;
use crate::config::Config;
use crate::contexts::ContextLimits;
use crate::service::CompileLimits;

/// The supervisor's and each worker's queue bound (`max_queue`).
pub fn queue_limits(config: &Config) -> QueueLimits {
    let defaults = QueueLimits::default();
    QueueLimits { max_queue: config.max_queue.unwrap_or(defaults.max_queue) }
}

/// The compile pool's size (`compile_threads`, `compile_queue`).
pub fn compile_limits(config: &Config) -> CompileLimits {
    let defaults = CompileLimits::default();
    CompileLimits {
        threads: config.compile_threads.unwrap_or(defaults.threads),
        queue: config.compile_queue.unwrap_or(defaults.queue),
    }
}

/// What the context registry holds (`context_memory`, `max_contexts`).
pub fn context_limits(config: &Config) -> ContextLimits {
    let defaults = ContextLimits::default();
    ContextLimits {
        memory: config.context_memory.unwrap_or(defaults.memory),
        max_contexts: config.max_contexts.unwrap_or(defaults.max_contexts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keys_take_each_rooms_default() {
        let config = Config::default();
        assert_eq!(queue_limits(&config), QueueLimits { max_queue: 512 });
        assert_eq!(context_limits(&config), ContextLimits { memory: 2 << 30, max_contexts: 4096 });
        let compile = compile_limits(&config);
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(compile, CompileLimits { threads: (cpus / 2).clamp(2, 8), queue: 64 });
    }

    #[test]
    fn keys_the_operator_set_win() {
        let config = Config {
            max_queue: Some(3),
            compile_threads: Some(5),
            compile_queue: Some(7),
            context_memory: Some(1 << 20),
            max_contexts: Some(9),
            ..Config::default()
        };
        assert_eq!(queue_limits(&config), QueueLimits { max_queue: 3 });
        assert_eq!(compile_limits(&config), CompileLimits { threads: 5, queue: 7 });
        assert_eq!(context_limits(&config), ContextLimits { memory: 1 << 20, max_contexts: 9 });
        let half = Config { compile_queue: Some(7), ..Config::default() };
        assert_eq!(compile_limits(&half).threads, CompileLimits::default().threads);
    }
}
