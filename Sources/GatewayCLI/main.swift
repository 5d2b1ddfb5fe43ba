import Foundation
import Gateway

exit(GatewayCommand.run(Array(CommandLine.arguments.dropFirst())))
