import AssertionCheck

extension GatewayConfig {
    /// The same configuration trusting another root: `serve --trust-anchor PEM`, which `make run` uses so the
    /// demo's simulated devices are accepted while gateway.yaml itself keeps Apple's root.
    func trusting(_ anchor: TrustAnchor, file: String) -> GatewayConfig {
        let attest = AppAttestConfig(apps: appAttest.apps, environments: appAttest.environments, trustAnchor: anchor,
                                     trustAnchorFile: file, challengeTTLSeconds: appAttest.challengeTTLSeconds,
                                     keyCacheSize: appAttest.keyCacheSize, challengeSecretFile: appAttest.challengeSecretFile,
                                     challengeSecrets: appAttest.challengeSecrets, challengeRateLimit: appAttest.challengeRateLimit,
                                     token: appAttest.token, debugTokens: appAttest.debugTokens)
        return GatewayConfig(listen: listen, adminListen: adminListen, prefix: prefix, redis: redis, appAttest: attest,
                             server: server, tls: tls, hardening: hardening, clientAddress: clientAddress, log: log, upstreams: upstreams,
                             routes: routes, apple: apple, playIntegrity: playIntegrity)
    }
}
