package com.example.orders;

import java.util.Set;

import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.config.ContainerCustomizer;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;

/**
 * Stops chosen listener containers by id, e.g. {@code orders-retry-1000} (a retry tier), {@code orders-dlt} (the
 * DLT handler) or {@code orders} (the main listener). {@code autoStartup} on the {@code @KafkaListener} would stop
 * every container the annotation derives, so the choice is made per container here. Boot applies a
 * {@link ContainerCustomizer} bean to its listener container factory, which {@code @RetryableTopic} reuses for
 * the retry and DLT containers.
 */
@Configuration(proxyBeanMethods = false)
public class ContainerSelection {

	private static final Log LOG = LogFactory.getLog(ContainerSelection.class);

	@Bean
	ContainerCustomizer<Object, Object, ConcurrentMessageListenerContainer<Object, Object>> stoppedContainers(
			@Value("${orders.containers.stopped:}") Set<String> stopped) {
		return container -> {
			if (stopped.contains(container.getListenerId())) {
				LOG.info("container " + container.getListenerId() + " not started (orders.containers.stopped)");
				container.setAutoStartup(false);
			}
		};
	}

}
